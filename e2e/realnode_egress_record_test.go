//go:build e2e && realnode

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// checkEgressRecord (docs/record.md §2.1): the claim's session record, as the in-cluster leader
// stored it from the gateway's decisions feed (GET /decisions on the gateway pods' decisions
// port, which only the operator's pods reach), holds the egress entries of the session's git
// clone through the gateway (git.internet.test, allowed, the credential rule's name and never its
// value, bytes moved) and of a refused host, each of source gateway; and no entry of another
// claim. The record is live (the claim is still Bound): the leader stores a batch one second
// after its first entry, so the entries are asked for again for up to 2 minutes.
func checkEgressRecord(t *testing.T, f *egressFixture, ns, claim string) {
	t.Helper()
	var entries []record.Entry
	var uid string
	eventually(t, 2*time.Minute, "the claim's record to hold the gateway's decisions of its git clone", func(ctx context.Context) (bool, error) {
		list, err := airlockClient.AirlockV1alpha1().SessionRecords(ns).List(ctx, metav1.ListOptions{LabelSelector: recordstore.LabelRecordClaim + "=" + claim})
		if err != nil {
			return false, err
		}
		entries, uid = nil, ""
		for i := range list.Items {
			uid = list.Items[i].Spec.ClaimUID
			sc := bufio.NewScanner(strings.NewReader(list.Items[i].Spec.Entries))
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			for sc.Scan() {
				var e record.Entry
				if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
					return false, err
				}
				entries = append(entries, e)
			}
		}
		for _, e := range entries {
			if e.Kind == record.KindEgress && e.Host == "git.internet.test" && e.Verdict == record.VerdictAllowed {
				return true, nil
			}
		}
		return false, nil
	})
	var clone, denied *record.Entry
	for i, e := range entries {
		if strings.Contains(string(mustLine(t, e)), f.credential) {
			t.Errorf("entry %d holds the injected credential's value", e.Seq)
		}
		if e.Claim != uid {
			t.Errorf("entry %d is of claim %q, not %q", e.Seq, e.Claim, uid)
		}
		if e.Kind != record.KindEgress {
			continue
		}
		if e.Source != record.SourceGateway || e.Boot == "" || e.SourceSeq == 0 {
			t.Errorf("egress entry %d: source %q boot %q source_seq %d, want the gateway's", e.Seq, e.Source, e.Boot, e.SourceSeq)
		}
		switch {
		case e.Host == "git.internet.test" && e.Verdict == record.VerdictAllowed && clone == nil:
			clone = &entries[i]
		case e.Verdict == record.VerdictDenied && denied == nil:
			denied = &entries[i]
		}
	}
	if clone == nil {
		t.Fatalf("no allowed egress entry of git.internet.test in the record")
	}
	if clone.Port != 443 || clone.Credential != egressTestCredFileName || clone.Usage == nil || clone.Usage.EgressBytes <= 0 {
		t.Errorf("the clone's egress entry: port %d credential %q usage %+v; want 443, %q and bytes", clone.Port, clone.Credential, clone.Usage, egressTestCredFileName)
	}
	if denied == nil {
		t.Errorf("no denied egress entry in the record (the suite's techniques are refused)")
	} else {
		t.Logf("a refused host in the record: %s:%d %s", denied.Host, denied.Port, denied.Reason)
		if denied.Reason == "" || denied.Reason == "allowed" {
			t.Errorf("the denied entry's reason %q", denied.Reason)
		}
	}
}

func mustLine(t *testing.T, e record.Entry) []byte {
	t.Helper()
	b, err := e.Line()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
