//go:build !linux

package main

// asJobShell does nothing: the terminal tests are Linux's.
func asJobShell() {}
