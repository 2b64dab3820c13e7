//go:build sandboxd_only

package cmd

import (
	"slices"
	"testing"
)

// TestSandboxdOnlyCommands checks the sandbox images' build: every command
// but the operator.
func TestSandboxdOnlyCommands(t *testing.T) {
	var names []string
	for _, c := range NewAirlockCommand().Commands() {
		names = append(names, c.Name())
	}
	slices.Sort(names)
	if want := []string{"sandboxd", "sync", "version"}; !slices.Equal(names, want) {
		t.Errorf("commands %v, want %v", names, want)
	}
}
