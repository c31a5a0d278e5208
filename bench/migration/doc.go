// Package migration holds the test that compiles the migration guides'
// code for the peer libraries (the "```go before" blocks of README.md and
// docs/*.md) against the versions the bench module requires. It is a
// package of its own so that the test needs neither the benchmark's code
// nor its dependencies beyond the peers.
package migration
