// Command airlock is the one binary of airlock: operator, sandboxd, sync, egress and version.
package main

import (
	"os"

	"github.com/airlock-dev/airlock/pkg/cmd"
)

func main() {
	command := cmd.NewAirlockCommand()
	code := cmd.Run(command)
	os.Exit(code)
}
