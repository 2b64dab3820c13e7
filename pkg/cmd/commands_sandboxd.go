//go:build sandboxd_only

package cmd

import "github.com/spf13/cobra"

// commands are the subcommands of the sandbox images' binary, built with
// -tags sandboxd_only: all but the operator, which links client-go, the
// generated clients and leader election, and with them about 14 MiB of
// sandboxd's resident memory at rest (docs/decisions.md, "sandboxd transport
// speed"), and the egress gateway, which runs in the operator image too.
// The sync-back Job runs the operator image.
func commands() []*cobra.Command {
	return []*cobra.Command{
		newSandboxdCommand(NewSandboxdOptions()),
		newSyncCommand(NewSyncOptions()),
		newVersionCommand(),
	}
}
