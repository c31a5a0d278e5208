// Package readme holds the test that compiles every Go block of the
// repository's README.md, so that an example there can never rot. It has
// no code of its own; see readme_test.go for the convention the blocks
// follow.
package readme
