//go:build e2e && realnode

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

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
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
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
	if err != nil {
		explainEgressRecord(t, f, ns, claim, entries)
		t.Fatalf("waiting for the claim's record to hold the gateway's decisions of its git clone: %v", err)
	}
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

// explainEgressRecord logs what the claim's record held when the gateway's decisions did not
// come (its entries by source and kind, its egress entries), what each gateway pod's audit lines
// say of the claim, and what the operator's pods logged of it and of the decisions feeds: the
// failure then says where the decisions stopped.
func explainEgressRecord(t *testing.T, f *egressFixture, ns, claim string, entries []record.Entry) {
	t.Helper()
	ctx := context.Background()
	kinds := map[string]int{}
	for _, e := range entries {
		kinds[e.Source+"/"+e.Kind]++
		if e.Kind == record.KindEgress || e.Kind == record.KindRecordGap {
			t.Logf("record entry %d: %s %s %s:%d %s %s boot %s source_seq %d %s", e.Seq, e.Source, e.Kind, e.Host, e.Port, e.Verdict, e.Reason, e.Boot, e.SourceSeq, e.Message)
		}
	}
	t.Logf("the record of %s/%s holds %d entries by source/kind: %v", ns, claim, len(entries), kinds)
	for _, p := range f.gatewayPods {
		logs, err := kubeClient.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Logf("gateway pod %s: %v", p.Name, err)
			continue
		}
		n := 0
		for _, line := range strings.Split(string(logs), "\n") {
			if strings.Contains(line, `claim="`+ns+"/"+claim+`"`) {
				n++
			}
		}
		t.Logf("gateway pod %s (%s): %d audit lines of the claim", p.Name, p.Status.PodIP, n)
	}
	logOperatorLines(t, ns, 200)
}
