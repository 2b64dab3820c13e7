package egress

import (
	"context"
	"crypto/sha256"

	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// eventComponent is the events' source and reporting controller.
const eventComponent = "airlock-egress"

// maxEventRetries bounds the attempts at one event whose creation fails (the API server down):
// an event is worth little late, and the audit line has the refusal anyway.
const maxEventRetries = 5

// SharedDenialEvents is DenialEvents whose events every replica writes under one name per claim
// and host (EventName): the first replica to refuse a claim's host creates it, and the others,
// refusing it too, find it there (AlreadyExists) and write nothing, so a claim gets one event per
// host however many replicas serve it (within an event's life on the API server, an hour by
// default). Observe only enqueues; Run writes.
type SharedDenialEvents struct {
	*DenialEvents
	events   typedcorev1.EventsGetter
	clock    clock.Clock
	instance string
	queue    workqueue.TypedRateLimitingInterface[pendingEvent]
}

// pendingEvent is an event to write (comparable: the queue folds repeats).
type pendingEvent struct {
	namespace, claim string
	uid              types.UID
	host, message    string
}

// NewSharedDenialEvents returns SharedDenialEvents that create core/v1 events through events,
// timestamped by clk, reported by instance (the gateway's pod).
func NewSharedDenialEvents(events typedcorev1.EventsGetter, clk clock.WithTicker, instance string) *SharedDenialEvents {
	s := &SharedDenialEvents{events: events, clock: clk, instance: instance,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[pendingEvent](),
			workqueue.TypedRateLimitingQueueConfig[pendingEvent]{Name: "egress-denial-events", Clock: clk})}
	s.DenialEvents = newDenialEvents(func(r Record, _ *corev1.ObjectReference, message string) {
		s.queue.Add(pendingEvent{namespace: r.Namespace, claim: r.Claim, uid: r.ClaimUID, host: r.Host, message: message})
	})
	return s
}

// EventName is the name of a claim's event for a refused host: the same in every replica, and
// another for a claim of the same name made again (its UID).
func EventName(namespace, claim string, uid types.UID, host string) string {
	sum := sha256.Sum256([]byte(namespace + "\x00" + claim + "\x00" + string(uid) + "\x00" + host))
	return "airlock-egress-denied-" + fmt.Sprintf("%x", sum[:16])
}

// Run writes the events until ctx is done, and returns once its worker has.
func (s *SharedDenialEvents) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	var wg wait.Group
	wg.StartWithContext(ctx, func(ctx context.Context) {
		for s.processNext(ctx) {
		}
	})
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
}

func (s *SharedDenialEvents) processNext(ctx context.Context) bool {
	e, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	defer s.queue.Done(e)
	err := s.write(ctx, e)
	switch {
	case err == nil:
		s.queue.Forget(e)
	case s.queue.NumRequeues(e) < maxEventRetries && ctx.Err() == nil:
		s.queue.AddRateLimited(e)
	default:
		klog.FromContext(ctx).Error(err, "Dropping an EgressDenied event", "claim", klog.KRef(e.namespace, e.claim), "host", e.host)
		s.queue.Forget(e)
	}
	return true
}

// write creates the event; one that exists already (another replica's) is left as it is.
func (s *SharedDenialEvents) write(ctx context.Context, e pendingEvent) error {
	now := metav1.NewTime(s.clock.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: EventName(e.namespace, e.claim, e.uid, e.host), Namespace: e.namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: airlockv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxClaim",
			Namespace: e.namespace, Name: e.claim, UID: e.uid},
		Reason: EventReasonDenied, Message: e.message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: eventComponent},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: eventComponent, ReportingInstance: s.instance,
	}
	_, err := s.events.Events(e.namespace).Create(ctx, ev, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating event %s/%s: %w", e.namespace, ev.Name, err)
	}
	return nil
}
