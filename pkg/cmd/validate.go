package cmd

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Checks of flag values shared by the commands of every build (the sandbox image's binary
// has no operator command: commands_sandboxd.go).

// disabledBindAddress is the bind address that turns a listener off; operator.DisabledBindAddress
// (checked equal in options_test.go), kept here so that sandboxd's build does not link the operator.
const disabledBindAddress = "0"

// validateBindAddress checks that addr is host:port, with a port from 0 to 65535 (0: any free
// port) and a host that is empty (every interface), an IP address or a host name. With
// allowDisabled, disabledBindAddress is accepted too.
func validateBindAddress(addr string, allowDisabled bool) error {
	if allowDisabled && addr == disabledBindAddress {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if allowDisabled {
			return fmt.Errorf(`must be host:port, like ":8080" or "127.0.0.1:8080", or "0" to disable (%v)`, err)
		}
		return fmt.Errorf(`must be host:port, like ":8080" or "127.0.0.1:8080" (%v)`, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q must be a number from 0 to 65535", port)
	}
	if host != "" && net.ParseIP(host) == nil && len(validation.IsDNS1123Subdomain(host)) > 0 {
		return fmt.Errorf("host %q must be empty, an IP address or a host name", host)
	}
	return nil
}

// checkRegularFile checks that name exists and is a regular file.
func checkRegularFile(name string) error {
	fi, err := os.Stat(name)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", name)
	}
	return nil
}

// checkReadableFile checks that name is a regular file this process can open for reading.
func checkReadableFile(name string) error {
	if err := checkRegularFile(name); err != nil {
		return err
	}
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	return f.Close()
}
