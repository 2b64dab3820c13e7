package recordwebhook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Path is where the API server sends its AdmissionReviews.
const Path = "/validate"

// maxReviewBytes bounds a request body: an AdmissionReview holds the object and its previous
// version, each at most the API server's 3 MiB, with room for their JSON encoding.
const maxReviewBytes = 8 << 20

// reviewTimeout bounds the lookups of one review: the API server waits for the webhook for its
// configured timeout (10 s at most) and then fails the write (failurePolicy Fail).
const reviewTimeout = 8 * time.Second

// Handler answers AdmissionReviews (admission.k8s.io/v1) at Path with Review's verdict: over
// Cache first when it is set, and over Lookup (the API server) when that refuses (Judge).
type Handler struct {
	Lookup Lookup
	Cache  Lookup
	Config Config
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "only POST of an AdmissionReview")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("reading the body: %v", err))
		return
	}
	if len(body) > maxReviewBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body exceeds %d bytes", maxReviewBytes))
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("not an AdmissionReview: %v", err))
		return
	}
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" || review.Request == nil {
		writeError(w, http.StatusBadRequest, "not an admission.k8s.io/v1 AdmissionReview with a request")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
	defer cancel()
	req := review.Request
	v, fromCache := Judge(ctx, req, h.Cache, h.Lookup, h.Config)
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: v.Allowed}
	if v.Allowed {
		klog.FromContext(ctx).V(4).Info("Allowed a write of the operator", "operation", req.Operation, "kind", req.Kind.Kind,
			"object", klog.KRef(req.Namespace, req.Name), "dryRun", req.DryRun != nil && *req.DryRun, "cache", fromCache)
	}
	if !v.Allowed {
		resp.Result = &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusForbidden,
			Reason:  metav1.StatusReasonForbidden,
			Message: "airlock records webhook: " + v.Reason,
		}
		klog.FromContext(ctx).Info("Refused a write of the operator", "operation", req.Operation, "kind", req.Kind.Kind,
			"object", klog.KRef(req.Namespace, req.Name), "user", req.UserInfo.Username, "dryRun", req.DryRun != nil && *req.DryRun, "reason", v.Reason)
	}
	review.Request = nil
	review.Response = resp
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&review); err != nil {
		klog.FromContext(ctx).V(2).Info("Writing an AdmissionReview's answer failed", "err", err)
	}
}

// writeError answers a request that is no AdmissionReview: the status and a JSON body.
func writeError(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": message})
}
