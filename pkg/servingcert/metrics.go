package servingcert

import (
	"crypto/tls"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	// certificateExpiry is when the certificate the Sandbox API serves now expires: alert on it
	// coming close (it is renewed at two thirds of its life, so a value within a third of the
	// lifetime means renewal is failing).
	certificateExpiry = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      "airlock",
		Name:           "sandbox_api_certificate_expiration_timestamp_seconds",
		Help:           "When the certificate the Sandbox API serves expires (Unix seconds).",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(certificateExpiry) })
}

// observeServed records the certificate now served.
func observeServed(cert *tls.Certificate) {
	if cert != nil && cert.Leaf != nil {
		certificateExpiry.Set(float64(cert.Leaf.NotAfter.Unix()))
	}
}
