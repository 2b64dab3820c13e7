//go:build !sandboxd_only

package cmd

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

// operatorClients are the operator's API clients. Each has a rate limiter of its own, so that one
// kind of request never waits in front of another.
type operatorClients struct {
	// kube talks to the core APIs (protobuf), airlock to the airlock.dev APIs.
	kube    kubernetes.Interface
	airlock airlockclientset.Interface
	// review makes the Sandbox API's TokenReviews, event records events.
	review, event kubernetes.Interface
	// poolKube and poolAirlock are the warm pool refills': a refill never waits in front of a
	// claim's write.
	poolKube    kubernetes.Interface
	poolAirlock airlockclientset.Interface
	// record writes the session records' segments (SessionRecords): a record's write never waits
	// in front of a claim's.
	record airlockclientset.Interface
	// leaderElection renews the lease, so that lease renewals never queue behind the
	// controllers' requests.
	leaderElection kubernetes.Interface
}

// newOperatorClients builds the operator's clients from restConfig, each with userAgent and the
// suffix of its use; no lease request outlives half of renewDeadline.
func newOperatorClients(restConfig *rest.Config, userAgent string, renewDeadline time.Duration) (*operatorClients, error) {
	kubeConfig := rest.CopyConfig(restConfig)
	kubeConfig.ContentType = "application/vnd.kubernetes.protobuf"
	var c operatorClients
	var err error
	if c.kube, err = kubeClientFor(kubeConfig, userAgent, "the Kubernetes client"); err != nil {
		return nil, err
	}
	if c.review, err = kubeClientFor(kubeConfig, userAgent+"/sandbox-api", "the Sandbox API's review client"); err != nil {
		return nil, err
	}
	if c.event, err = kubeClientFor(kubeConfig, userAgent+"/events", "the event client"); err != nil {
		return nil, err
	}
	if c.poolKube, err = kubeClientFor(kubeConfig, userAgent+"/warm-pools", "the warm pool client"); err != nil {
		return nil, err
	}
	if c.airlock, err = airlockClientFor(restConfig, userAgent, "the airlock client"); err != nil {
		return nil, err
	}
	if c.poolAirlock, err = airlockClientFor(restConfig, userAgent+"/warm-pools", "the warm pool airlock client"); err != nil {
		return nil, err
	}
	if c.record, err = airlockClientFor(restConfig, userAgent+"/session-records", "the session records' client"); err != nil {
		return nil, err
	}
	// As kube-controller-manager does: no lease request outlives half the renew deadline, so
	// that a campaign against an API server that does not answer retries rather than hangs.
	leConfig := rest.CopyConfig(restConfig)
	leConfig.Timeout = renewDeadline / 2
	if c.leaderElection, err = kubeClientFor(leConfig, userAgent+"/leader-election", "the leader election client"); err != nil {
		return nil, err
	}
	return &c, nil
}

// kubeClientFor is a core client of a copy of base with userAgent; what names it in the error.
func kubeClientFor(base *rest.Config, userAgent, what string) (kubernetes.Interface, error) {
	config := rest.CopyConfig(base)
	config.UserAgent = userAgent
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", what, err)
	}
	return client, nil
}

// airlockClientFor is an airlock.dev client of a copy of base with userAgent; what names it in the
// error.
func airlockClientFor(base *rest.Config, userAgent, what string) (airlockclientset.Interface, error) {
	config := rest.CopyConfig(base)
	config.UserAgent = userAgent
	client, err := airlockclientset.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", what, err)
	}
	return client, nil
}
