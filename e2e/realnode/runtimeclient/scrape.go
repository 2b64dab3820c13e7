package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ScrapeResult is one URL's answer in `scrape`.
type ScrapeResult struct {
	Status int `json:"status"`
	// Families maps each metric family served to its type (counter, gauge, histogram, summary,
	// untyped) and how many samples it has.
	Families map[string]ScrapedFamily `json:"families,omitempty"`
	Error    string                   `json:"error,omitempty"`
	// Body is the answer of a URL of the plan's Raw, as it came (at most 4 MiB).
	Body string `json:"body,omitempty"`
}

// ScrapedFamily is one family of a scrape.
type ScrapedFamily struct {
	Type    string `json:"type"`
	Samples int    `json:"samples"`
	// HistogramSum and HistogramCount add up a histogram's series (the sum of their observations
	// and how many there were).
	HistogramSum   float64 `json:"histogramSum,omitempty"`
	HistogramCount uint64  `json:"histogramCount,omitempty"`
	// HistogramBuckets adds up the series' cumulative counts by upper bound (le, as the text
	// format writes it).
	HistogramBuckets map[string]uint64 `json:"histogramBuckets,omitempty"`
	// Counters adds up a counter's series by their label values ("k=v,k=v", sorted).
	Counters map[string]float64 `json:"counters,omitempty"`
}

// runScrape GETs every URL of the plan, as Prometheus scrapes a target (Accept: the text format),
// and parses the answer with the Prometheus text parser.
func runScrape(ctx context.Context, p Plan) map[string]*ScrapeResult {
	limit := time.Duration(p.ScrapeSeconds) * time.Second
	if limit <= 0 {
		limit = 60 * time.Second
	}
	out := map[string]*ScrapeResult{}
	for _, u := range p.URLs {
		out[u] = scrapeRetry(ctx, u, p.Bearer[u], slices.Contains(p.Raw, u), limit)
		say("scrape %s: status %d, %d families %s", u, out[u].Status, len(out[u].Families), out[u].Error)
	}
	return out
}

// scrapeRetry scrapes u (with the bearer token, if not empty) until it answers (any HTTP
// status) or limit has passed.
func scrapeRetry(ctx context.Context, u, token string, raw bool, limit time.Duration) *ScrapeResult {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		r, err := scrape(ctx, u, token, raw)
		if err == nil {
			return r
		}
		select {
		case <-ctx.Done():
			return &ScrapeResult{Error: err.Error()}
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func scrape(ctx context.Context, u, token string, raw bool) (*ScrapeResult, error) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	r := &ScrapeResult{Status: resp.StatusCode}
	if raw {
		r.Body = string(body[:min(len(body), 4<<20)])
		return r, nil
	}
	if resp.StatusCode != http.StatusOK {
		r.Error = firstLine(string(body))
		return r, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		r.Error = fmt.Sprintf("parsing the answer: %v", err)
		return r, nil
	}
	r.Families = map[string]ScrapedFamily{}
	for name, f := range families {
		sf := ScrapedFamily{Type: strings.ToLower(f.GetType().String()), Samples: len(f.GetMetric())}
		for _, m := range f.GetMetric() {
			if c := m.GetCounter(); c != nil {
				if sf.Counters == nil {
					sf.Counters = map[string]float64{}
				}
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				sort.Strings(labels)
				sf.Counters[strings.Join(labels, ",")] += c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				sf.HistogramSum += h.GetSampleSum()
				sf.HistogramCount += h.GetSampleCount()
				if sf.HistogramBuckets == nil {
					sf.HistogramBuckets = map[string]uint64{}
				}
				for _, b := range h.GetBucket() {
					sf.HistogramBuckets[strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)] += b.GetCumulativeCount()
				}
			}
		}
		r.Families[name] = sf
	}
	return r, nil
}
