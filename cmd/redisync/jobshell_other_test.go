//go:build !linux

package main

// asHelper does nothing: the tests that need helpers are Linux's.
func asHelper() {}
