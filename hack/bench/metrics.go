package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// families are the metric families of one scrape, by name.
type families map[string]*dto.MetricFamily

func parseMetrics(r io.Reader) (families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return fams, nil
}

// scrapeURL reads a /metrics endpoint over plain HTTP (the operator's).
func scrapeURL(ctx context.Context, client *http.Client, url string) (families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// scrapeAPIServer reads kube-apiserver's /metrics with the admin client.
func scrapeAPIServer(ctx context.Context, c rest.Interface) (families, error) {
	body, err := c.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET kube-apiserver /metrics: %w", err)
	}
	return parseMetrics(strings.NewReader(string(body)))
}

// writeVerbs maps apiserver_request_total's verbs that write (the request's HTTP method, APPLY
// for a server-side apply) to the verbs the audit log and the tables use.
var writeVerbs = map[string]string{
	"POST": "CREATE", "PUT": "UPDATE", "PATCH": "PATCH", "APPLY": "APPLY", "DELETE": "DELETE", "DELETECOLLECTION": "DELETECOLLECTION",
}

// writeKey is one row of the writes table.
type writeKey struct {
	Group, Resource, Subresource, Verb, Code string
}

// writeCounts counts API requests by writeKey.
type writeCounts map[writeKey]float64

// apiserverWrites returns apiserver_request_total's write requests by group, resource,
// subresource, verb (CREATE, UPDATE, ...) and code, summed over the other labels (scope,
// component); dry runs are left out.
func apiserverWrites(f families) writeCounts {
	out := writeCounts{}
	fam, ok := f["apiserver_request_total"]
	if !ok {
		return out
	}
	for _, m := range fam.GetMetric() {
		l := labels(m)
		verb, ok := writeVerbs[l["verb"]]
		if !ok || l["dry_run"] != "" {
			continue
		}
		out[writeKey{Group: l["group"], Resource: l["resource"], Subresource: l["subresource"], Verb: verb, Code: l["code"]}] += m.GetCounter().GetValue()
	}
	return out
}

// sub returns w - before, leaving out keys that did not change.
func (w writeCounts) sub(before writeCounts) writeCounts {
	out := writeCounts{}
	for k, v := range w {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// background says whether writes to resource are the plane's own heartbeat (Node leases and
// status, the operator's leader lease) rather than work for claims.
func background(k writeKey) bool {
	return (k.Group == "coordination.k8s.io" && k.Resource == "leases") || (k.Group == "" && k.Resource == "nodes")
}

// review says whether resource is a review (TokenReview, SubjectAccessReview): a request the API
// server answers without storing anything.
func review(k writeKey) bool {
	return strings.HasSuffix(k.Resource, "reviews")
}

// event says whether resource is Events (core or events.k8s.io).
func event(k writeKey) bool { return k.Resource == "events" }

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// Histogram is the change of a histogram family (all its series together) over a window.
type Histogram struct {
	Count  float64 `json:"count"`
	MeanMs float64 `json:"meanMs"`
	// P50Ms and P99Ms are estimated from the buckets as Prometheus's histogram_quantile does
	// (linear within a bucket); a quantile in the +Inf bucket is the highest finite bound.
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
}

type bucket struct {
	upper      float64
	cumulative float64
}

// histogramTotals sums a histogram family's series: count, sum and cumulative buckets.
func histogramTotals(fam *dto.MetricFamily) (count, sum float64, buckets []bucket) {
	byUpper := map[float64]float64{}
	for _, m := range fam.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		count += float64(h.GetSampleCount())
		sum += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			byUpper[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	for u, c := range byUpper {
		buckets = append(buckets, bucket{u, c})
	}
	slices.SortFunc(buckets, func(a, b bucket) int {
		switch {
		case a.upper < b.upper:
			return -1
		case a.upper > b.upper:
			return 1
		}
		return 0
	})
	return count, sum, buckets
}

// histogramDelta is the histogram of the observations made between before and after (either may
// lack the family: nothing observed yet).
func histogramDelta(before, after *dto.MetricFamily) Histogram {
	ac, as, ab := histogramTotals(after)
	bc, bs, bb := histogramTotals(before)
	count, sum := ac-bc, as-bs
	if count <= 0 {
		return Histogram{}
	}
	prev := map[float64]float64{}
	for _, b := range bb {
		prev[b.upper] = b.cumulative
	}
	delta := make([]bucket, 0, len(ab))
	for _, b := range ab {
		delta = append(delta, bucket{b.upper, b.cumulative - prev[b.upper]})
	}
	return Histogram{
		Count:  count,
		MeanMs: sum / count * 1000,
		P50Ms:  bucketQuantile(0.5, count, delta) * 1000,
		P99Ms:  bucketQuantile(0.99, count, delta) * 1000,
	}
}

// bucketQuantile estimates quantile q of count observations from cumulative buckets sorted by
// upper bound.
func bucketQuantile(q, count float64, buckets []bucket) float64 {
	rank := q * count
	lower, below := 0.0, 0.0
	highestFinite := 0.0
	for _, b := range buckets {
		if math.IsInf(b.upper, 1) {
			break
		}
		highestFinite = b.upper
		if b.cumulative >= rank {
			in := b.cumulative - below
			if in <= 0 {
				return b.upper
			}
			return lower + (b.upper-lower)*(rank-below)/in
		}
		lower, below = b.upper, b.cumulative
	}
	return highestFinite
}

// histogramsMatching returns the change, over a window, of each histogram family whose name
// matches re.
func histogramsMatching(re *regexp.Regexp, before, after families) map[string]Histogram {
	out := map[string]Histogram{}
	for name, fam := range after {
		if fam.GetType() != dto.MetricType_HISTOGRAM || !re.MatchString(name) {
			continue
		}
		h := histogramDelta(before[name], fam)
		if h.Count > 0 {
			out[name] = h
		}
	}
	return out
}

// counterSum is the sum of a counter family's series whose labels include want.
func counterSum(f families, name string, want map[string]string) float64 {
	var total float64
	for _, m := range f[name].GetMetric() {
		l := labels(m)
		match := true
		for k, v := range want {
			if l[k] != v {
				match = false
				break
			}
		}
		if match {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// counterDeltaBy is the change of a counter family between two scrapes, summed by the values of
// the labels named (joined with a space), leaving out keys that did not change.
func counterDeltaBy(before, after families, name string, by ...string) map[string]float64 {
	sum := func(f families) map[string]float64 {
		out := map[string]float64{}
		for _, m := range f[name].GetMetric() {
			l := labels(m)
			parts := make([]string, 0, len(by))
			for _, k := range by {
				parts = append(parts, l[k])
			}
			out[strings.Join(parts, " ")] += m.GetCounter().GetValue()
		}
		return out
	}
	b, out := sum(before), map[string]float64{}
	for k, v := range sum(after) {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
