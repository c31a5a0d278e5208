// Command redisyncvet runs the redisyncvet analyzer (package
// github.com/redisync-go/redisync/extra/redisyncvet): releases of redisync
// locks given a context that is not the hold's, and acquisitions whose hold
// context is discarded. Run it under go vet, which hands it each package:
//
//	go install github.com/redisync-go/redisync/extra/redisyncvet/cmd/redisyncvet@latest
//	go vet -vettool=$(which redisyncvet) ./...
//
// or alone: redisyncvet ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/redisync-go/redisync/extra/redisyncvet"
)

func main() { singlechecker.Main(redisyncvet.Analyzer) }
