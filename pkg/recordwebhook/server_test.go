package recordwebhook

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// TestHandler: an AdmissionReview gets its verdict back under its request's UID (a refusal with
// 403 and the reason); anything else gets a 4xx status and a JSON error, and no verdict.
func TestHandler(t *testing.T) {
	w := newWorld()
	h := &Handler{Lookup: w.look, Config: Config{SyncImage: testSyncImage}}
	review := func(allowedPod bool) string {
		p := sandboxpod.ClaimPod(w.claim, w.claim.Status.Frozen)
		if !allowedPod {
			p.Labels["airlock.dev/claim"] = "c9"
			p.OwnerReferences[0].Name = "c9"
		}
		req := request(admissionv1.Create, "Pod", p, nil)
		req.UID = types.UID("uid-review")
		b, _ := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: typeMeta(), Request: req})
		return string(b)
	}
	for name, tc := range map[string]struct {
		method, contentType, body string
		code                      int
		allowed                   *bool
	}{
		"allowed":            {method: "POST", contentType: "application/json", body: review(true), code: 200, allowed: ptrTo(true)},
		"refused":            {method: "POST", contentType: "application/json", body: review(false), code: 200, allowed: ptrTo(false)},
		"GET":                {method: "GET", code: 405},
		"not JSON":           {method: "POST", contentType: "application/json", body: "{", code: 400},
		"another media type": {method: "POST", contentType: "text/plain", body: review(true), code: 415},
		"no request":         {method: "POST", contentType: "application/json", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, code: 400},
		"another version":    {method: "POST", contentType: "application/json", body: strings.Replace(review(true), "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1), code: 400},
		"too large":          {method: "POST", contentType: "application/json", body: strings.Repeat(" ", maxReviewBytes+1), code: 413},
	} {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, Path, strings.NewReader(tc.body))
			r.Header.Set("Content-Type", tc.contentType)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if tc.allowed == nil {
				var e map[string]string
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e["error"] == "" {
					t.Fatalf("body %q is not a JSON error", rec.Body)
				}
				return
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("no AdmissionReview answer: %v %s", err, rec.Body)
			}
			if out.Response.UID != "uid-review" || out.Response.Allowed != *tc.allowed {
				t.Fatalf("response %+v, want UID uid-review, allowed %v", out.Response, *tc.allowed)
			}
			if !*tc.allowed && (out.Response.Result == nil || out.Response.Result.Code != 403 || !strings.Contains(out.Response.Result.Message, "does not exist")) {
				t.Fatalf("refusal %+v, want 403 with the reason", out.Response.Result)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

func typeMeta() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}
}
