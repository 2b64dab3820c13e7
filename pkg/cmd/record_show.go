//go:build !sandboxd_only

package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// RecordShowOptions are the flags of `airlock record CLAIM`.
type RecordShowOptions struct {
	Kubeconfig, Context, Namespace string
	// UID picks one record when several claims of the name had one.
	UID string
	// Output is text, jsonl or ocsf.
	Output        string
	PublicKeyFile string

	// client and airlock, when set (tests), are used instead of clients built from the kubeconfig.
	client  kubernetes.Interface
	airlock airlockclientset.Interface
}

// AddFlags binds the options to fs.
func (o *RecordShowOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "path to a kubeconfig file (default: as kubectl finds one)")
	fs.StringVar(&o.Context, "context", o.Context, "the kubeconfig context to use")
	fs.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "the claim's namespace (default: the context's)")
	fs.StringVar(&o.UID, "uid", o.UID, "the UID of the claim whose record to show, when several claims of that name had one")
	fs.StringVarP(&o.Output, "output", "o", "text", "text (one line an entry), jsonl (the export verify reads) or ocsf")
	fs.StringVar(&o.PublicKeyFile, "public-key", o.PublicKeyFile, "PEM file of the operator's record-signing public keys: the record is verified against it (default: the namespace's airlock-ca ConfigMap, key record-signing.pub)")
}

// Validate returns every invalid value.
func (o *RecordShowOptions) Validate() []error {
	if !slices.Contains([]string{"text", "jsonl", "ocsf"}, o.Output) {
		return []error{fmt.Errorf("--output %q: want text, jsonl or ocsf", o.Output)}
	}
	return nil
}

func (o *RecordShowOptions) clientsAndNamespace() (kubernetes.Interface, airlockclientset.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	ns := o.Namespace
	if ns == "" {
		var err error
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, nil, "", fmt.Errorf("the kubeconfig's namespace: %w", err)
		}
	}
	if o.client != nil {
		return o.client, o.airlock, ns, nil
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("the kubeconfig: %w", err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, "", err
	}
	a, err := airlockclientset.NewForConfig(cfg)
	return c, a, ns, err
}

// records returns the segments (SessionRecords) of each record of the claim named name, by claim
// UID, and the UIDs newest first (by their first segment's creation).
func records(ctx context.Context, c airlockclientset.Interface, ns, name string) (map[string][]*airlockv1alpha1.SessionRecord, []string, error) {
	sel := labels.SelectorFromSet(labels.Set{recordstore.LabelRecordClaim: name}).String()
	list, err := c.AirlockV1alpha1().SessionRecords(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the records of claim %s/%s: %w", ns, name, err)
	}
	byUID := map[string][]*airlockv1alpha1.SessionRecord{}
	first := map[string]metav1.Time{}
	for i := range list.Items {
		sr := &list.Items[i]
		if sr.Spec.ClaimName != name {
			continue // labelled for the claim, but not its record
		}
		uid := sr.Spec.ClaimUID
		byUID[uid] = append(byUID[uid], sr)
		if t, ok := first[uid]; !ok || sr.CreationTimestamp.Before(&t) {
			first[uid] = sr.CreationTimestamp
		}
	}
	uids := make([]string, 0, len(byUID))
	for u := range byUID {
		uids = append(uids, u)
	}
	slices.SortFunc(uids, func(a, b string) int {
		ta, tb := first[a], first[b]
		return tb.Compare(ta.Time)
	})
	return byUID, uids, nil
}

// publishedKeys reads the operator's record-signing public key from the namespace's airlock-ca
// ConfigMap (record-signing.pub), which the operator publishes in every namespace with an
// AgentRuntime when it serves TLS; nil when there is none (or it may not be read): the record is
// then printed, not verified.
func publishedKeys(ctx context.Context, c kubernetes.Interface, ns string) (record.Keys, error) {
	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the record-signing key from ConfigMap %s/%s: %w", ns, cabundle.ConfigMapName, err)
	}
	pem := cm.Data[cabundle.RecordSigningKey]
	if pem == "" {
		return nil, nil
	}
	keys, err := record.ParsePublicKeys([]byte(pem))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s, %s: %w", ns, cabundle.ConfigMapName, cabundle.RecordSigningKey, err)
	}
	return keys, nil
}

// showRecords prints the records of claim name as o asks, and fails when one does not verify.
func (o *RecordShowOptions) showRecords(ctx context.Context, name string, out io.Writer) error {
	c, a, ns, err := o.clientsAndNamespace()
	if err != nil {
		return err
	}
	byUID, uids, err := records(ctx, a, ns, name)
	if err != nil {
		return err
	}
	if o.UID != "" {
		uids = slices.DeleteFunc(uids, func(u string) bool { return u != o.UID })
	}
	if len(uids) == 0 {
		return fmt.Errorf("no record of claim %s/%s%s (a record is kept as long as the claim's workspace)", ns, name, map[bool]string{true: " with UID " + o.UID}[o.UID != ""])
	}
	if o.Output != "text" && len(uids) > 1 {
		return fmt.Errorf("claims named %s/%s had %d records (UIDs %s): pick one with --uid", ns, name, len(uids), strings.Join(uids, ", "))
	}
	var keys record.Keys
	if o.PublicKeyFile != "" {
		pem, err := os.ReadFile(o.PublicKeyFile)
		if err != nil {
			return fmt.Errorf("reading --public-key: %w", err)
		}
		if keys, err = record.ParsePublicKeys(pem); err != nil {
			return fmt.Errorf("--public-key %s: %w", o.PublicKeyFile, err)
		}
	} else if keys, err = publishedKeys(ctx, c, ns); err != nil {
		return err
	}
	var bad []string
	for _, uid := range uids {
		var export bytes.Buffer
		if _, err := recordstore.Export(byUID[uid], &export); err != nil {
			return fmt.Errorf("the record of claim %s/%s (UID %s): %w", ns, name, uid, err)
		}
		intact, err := o.print(out, ns, name, uid, export.Bytes(), keys)
		if err != nil {
			return err
		}
		if !intact {
			bad = append(bad, uid)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the record of claim %s/%s (UID %s) is not intact", ns, name, strings.Join(bad, ", "))
	}
	return nil
}

// print writes one record's export as o.Output asks, with its verification in text; it says
// whether the record verified (true when there is no key to verify with).
func (o *RecordShowOptions) print(out io.Writer, ns, name, uid string, export []byte, keys record.Keys) (bool, error) {
	switch o.Output {
	case "jsonl":
		_, err := out.Write(export)
		return true, err
	case "ocsf":
		return true, writeOCSF(bytes.NewReader(export), out)
	}
	entries, _, err := record.ReadJSONL(bytes.NewReader(export))
	if err != nil {
		fmt.Fprintf(out, "warning: %v\n", err)
	}
	fmt.Fprintf(out, "Record of claim %s/%s (UID %s): %d entries\n", ns, name, uid, len(entries))
	for _, e := range entries {
		fmt.Fprintf(out, "%5d  %s  %-8s  %-15s  %s\n", e.Seq, e.Time, e.Source, e.Kind, entryDetails(e))
	}
	if keys == nil {
		fmt.Fprintln(out, "Not verified: no record-signing key in ConfigMap airlock-ca (record-signing.pub); give --public-key (the operator's record-signing key).")
		return true, nil
	}
	rep, err := record.Verify(bytes.NewReader(export), keys, record.Options{Claim: uid})
	if err != nil {
		return false, err
	}
	for _, f := range rep.Findings {
		fmt.Fprintln(out, f.String())
	}
	fmt.Fprintln(out, "Verified:", rep.Verdict())
	return rep.Intact(), nil
}

// entryDetails is what an entry says, in a line.
func entryDetails(e record.Entry) string {
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	switch e.Kind {
	case record.KindToolCall:
		add("#%d %s %s %dms args=%.12s", e.Call, e.Tool, e.Status, e.DurationMS, e.ArgsSHA256)
	case record.KindFileWrite:
		size := int64(0)
		if e.Size != nil {
			size = *e.Size
		}
		add("#%d %s %d bytes sha256=%.12s", e.Call, e.Path, size, e.SHA256)
	case record.KindProcess:
		exit := 0
		if e.Exit != nil {
			exit = *e.Exit
		}
		add("#%d %q exit %d %dms", e.Call, strings.Join(e.Argv, " "), exit, e.DurationMS)
	case record.KindEgress:
		add("%s:%d %s %s credential=%s", e.Host, e.Port, e.Verdict, e.Reason, e.Credential)
	case record.KindClaimPhase:
		add("%s %s", e.Phase, e.Reason)
	case record.KindSandboxStopped, record.KindRecordSealed:
		add("count %d", e.Count)
	}
	if e.Message != "" {
		add("%s", e.Message)
	}
	return strings.Join(parts, " ")
}

// writeOCSF writes one OCSF event a line for each entry of the export r.
func writeOCSF(r io.Reader, out io.Writer) error {
	entries, _, err := record.ReadJSONL(r)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, e := range entries {
		ev, err := record.OCSF(e)
		if err != nil {
			return err
		}
		line, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	_, err = out.Write(b.Bytes())
	return err
}

var errNoClaim = errors.New("name a claim: airlock record CLAIM, or a subcommand")
