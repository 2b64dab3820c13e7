//go:build !sandboxd_only

package cmd

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-dev/airlock/pkg/record"
)

// RecordVerifyOptions are the flags of `airlock record verify`.
type RecordVerifyOptions struct {
	// PublicKeyFile holds the operator's record-signing public keys (PEM), as published.
	PublicKeyFile string
	// Claim is the UID of the claim the record must be of (empty: the one its entries are of).
	Claim string
}

// AddFlags binds the options to fs.
func (o *RecordVerifyOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.PublicKeyFile, "public-key", o.PublicKeyFile, "PEM file of the operator's record-signing public keys (the airlock-ca ConfigMap's record-signing.pub)")
	fs.StringVar(&o.Claim, "claim-uid", o.Claim, "the UID of the claim the record must be of (default: the claim its entries are of)")
}

// Validate returns every invalid value.
func (o *RecordVerifyOptions) Validate() []error {
	if o.PublicKeyFile == "" {
		return []error{errors.New("--public-key is required: a record is verified against the operator's public key")}
	}
	return nil
}

// newRecordCommand is `airlock record CLAIM`: a claim's session record as the cluster keeps it
// (docs/record.md), printed and verified; its subcommands read an export.
func newRecordCommand() *cobra.Command {
	o := &RecordShowOptions{}
	cmd := &cobra.Command{
		Use:   "record CLAIM",
		Short: "Print and verify a claim's session record; verify or convert an export (docs/record.md)",
		Long: `airlock record CLAIM reads the session record of the claim named CLAIM from the cluster (its
SessionRecord segments, kubectl get srec, with your kubeconfig), prints it (-o text, jsonl or ocsf) and, with
--public-key, verifies it. A claim named like a subcommand (verify, ocsf) cannot be named here.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errNoClaim
			}
			if errs := o.Validate(); len(errs) > 0 {
				return errors.Join(errs...)
			}
			return o.showRecords(cmd.Context(), args[0], cmd.OutOrStdout())
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.AddCommand(newRecordVerifyCommand(&RecordVerifyOptions{}), newRecordOCSFCommand())
	return cmd
}

func newRecordVerifyCommand(o *RecordVerifyOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify [FILE]",
		Short: "Verify a session record's JSON lines export (FILE, or standard input)",
		Long: `Verify checks each entry's hash and signature, its claim, the order and continuity of the
entries and the anchor's signature and count, prints each problem with its line and seq, and a
verdict. It exits 0 only when nothing is wrong (a live record is intact but not sealed).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := o.Validate(); len(errs) > 0 {
				return errors.Join(errs...)
			}
			pem, err := os.ReadFile(o.PublicKeyFile)
			if err != nil {
				return fmt.Errorf("reading --public-key: %w", err)
			}
			keys, err := record.ParsePublicKeys(pem)
			if err != nil {
				return fmt.Errorf("--public-key %s: %w", o.PublicKeyFile, err)
			}
			in, closeIn, err := openInput(cmd, args)
			if err != nil {
				return err
			}
			defer closeIn()
			rep, err := record.Verify(in, keys, record.Options{Claim: o.Claim})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, f := range rep.Findings {
				fmt.Fprintln(out, f.String())
			}
			fmt.Fprintf(out, "claim %s: %s\n", rep.Claim, rep.Verdict())
			if !rep.Intact() {
				return errors.New("the record is not intact")
			}
			return nil
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func newRecordOCSFCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ocsf [FILE]",
		Short: "Convert a session record's JSON lines export (FILE, or standard input) to OCSF events, one a line",
		Long: `ocsf writes one OCSF event per entry (docs/record.md §2.7); the anchor's line is left out. It
does not verify: run verify first.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, closeIn, err := openInput(cmd, args)
			if err != nil {
				return err
			}
			defer closeIn()
			return writeOCSF(in, cmd.OutOrStdout())
		},
	}
}

// openInput opens args[0], or standard input when there is none or it is "-".
func openInput(cmd *cobra.Command, args []string) (io.Reader, func(), error) {
	if len(args) == 0 || args[0] == "-" {
		return cmd.InOrStdin(), func() {}, nil
	}
	f, err := os.Open(args[0])
	if err != nil {
		return nil, nil, err
	}
	return f, func() { _ = f.Close() }, nil
}
