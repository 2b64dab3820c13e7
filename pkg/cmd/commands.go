//go:build !sandboxd_only

package cmd

import "github.com/spf13/cobra"

// commands are the subcommands of the full binary (the operator image; the
// sandbox images' binary leaves the operator and the egress gateway out:
// commands_sandboxd.go).
func commands() []*cobra.Command {
	return []*cobra.Command{
		newOperatorCommand(NewOperatorOptions()),
		newEgressCommand(NewEgressOptions()),
		newRecordsWebhookCommand(NewRecordsWebhookOptions()),
		newSandboxdCommand(NewSandboxdOptions()),
		newSyncCommand(NewSyncOptions()),
		newRecordCommand(),
		newVersionCommand(),
	}
}
