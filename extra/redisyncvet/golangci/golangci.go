// Package golangci registers the redisyncvet analyzer as a golangci-lint
// module plugin named "redisyncvet" (golangci-lint v2's plugin system, see
// https://golangci-lint.run/plugins/module-plugins/). Build a golangci-lint
// with it from a .custom-gcl.yml:
//
//	version: v2.15.0
//	plugins:
//	  - module: github.com/redisync-go/redisync/extra/redisyncvet
//	    import: github.com/redisync-go/redisync/extra/redisyncvet/golangci
//	    version: latest
//
// (`golangci-lint custom` writes ./custom-gcl), and enable it in .golangci.yml:
//
//	version: "2"
//	linters:
//	  enable:
//	    - redisyncvet
//	  settings:
//	    custom:
//	      redisyncvet:
//	        type: module
//	        description: releases of redisync locks given a context that is not the hold's
//
// It takes no settings.
package golangci

import (
	"fmt"

	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"

	"github.com/redisync-go/redisync/extra/redisyncvet"
)

func init() { register.Plugin("redisyncvet", New) }

// Settings are the plugin's settings: none.
type Settings struct{}

// New returns the plugin; golangci-lint calls it with the linter's
// settings from .golangci.yml, which must be empty.
func New(settings any) (register.LinterPlugin, error) {
	if _, err := register.DecodeSettings[Settings](settings); err != nil {
		return nil, fmt.Errorf("redisyncvet: %w", err)
	}
	return plugin{}, nil
}

type plugin struct{}

// BuildAnalyzers returns the redisyncvet analyzer.
func (plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) {
	return []*analysis.Analyzer{redisyncvet.Analyzer}, nil
}

// GetLoadMode says the analyzer needs type information.
func (plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
