// Package readme compiles the Go blocks of the repository's markdown
// (README.md and docs/*.md), so that an example there can never rot: the
// convention the blocks follow is in readme_test.go; readme.go holds the
// machinery, which the bench module's test also uses for the migration
// guides' blocks of the peer libraries' code ("```go before").
package readme
