package golangci_test

import (
	"testing"

	"github.com/golangci/plugin-module-register/register"

	"github.com/redisync-go/redisync/extra/redisyncvet"
	_ "github.com/redisync-go/redisync/extra/redisyncvet/golangci"
)

// The package registers the plugin "redisyncvet", which golangci-lint
// builds with the settings of .golangci.yml: none, or it says so; it runs
// the analyzer, with type information.
func TestPluginRegistered(t *testing.T) {
	newPlugin, err := register.GetPlugin("redisyncvet")
	if err != nil {
		t.Fatal(err)
	}
	for _, settings := range []any{nil, map[string]any{}} {
		p, err := newPlugin(settings)
		if err != nil {
			t.Fatalf("settings %v: %v", settings, err)
		}
		as, err := p.BuildAnalyzers()
		if err != nil || len(as) != 1 || as[0] != redisyncvet.Analyzer {
			t.Errorf("BuildAnalyzers() = %v, %v; want the redisyncvet analyzer", as, err)
		}
		if m := p.GetLoadMode(); m != register.LoadModeTypesInfo {
			t.Errorf("GetLoadMode() = %q, want %q", m, register.LoadModeTypesInfo)
		}
	}
	if _, err := newPlugin(map[string]any{"strict": true}); err == nil {
		t.Error("a setting the plugin does not have was accepted")
	}
}
