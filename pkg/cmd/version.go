package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/pkg/version"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			info := version.Get()
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "Version: %s\nCommit: %s\nGo version: %s\nPlatform: %s\n",
				info.Version, info.Commit, info.GoVersion, info.Platform)
			return err
		},
	}
}
