package record

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// recordControl is the controller's reads and writes of SessionRecords, from and to the API
// server (no cache holds them: an informer would hold every record's entries in memory).
type recordControl interface {
	List(ctx context.Context, namespace, selector string) ([]airlockv1alpha1.SessionRecord, error)
	Get(ctx context.Context, namespace, name string) (*airlockv1alpha1.SessionRecord, error)
	Create(ctx context.Context, sr *airlockv1alpha1.SessionRecord) (*airlockv1alpha1.SessionRecord, error)
	// Update is conditional on sr's resourceVersion.
	Update(ctx context.Context, sr *airlockv1alpha1.SessionRecord) (*airlockv1alpha1.SessionRecord, error)
}

type realRecords struct{ client airlockclientset.Interface }

func (r realRecords) List(ctx context.Context, namespace, selector string) ([]airlockv1alpha1.SessionRecord, error) {
	list, err := r.client.AirlockV1alpha1().SessionRecords(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (r realRecords) Get(ctx context.Context, namespace, name string) (*airlockv1alpha1.SessionRecord, error) {
	return r.client.AirlockV1alpha1().SessionRecords(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (r realRecords) Create(ctx context.Context, sr *airlockv1alpha1.SessionRecord) (*airlockv1alpha1.SessionRecord, error) {
	return r.client.AirlockV1alpha1().SessionRecords(sr.Namespace).Create(ctx, sr, metav1.CreateOptions{FieldManager: FieldManager})
}

func (r realRecords) Update(ctx context.Context, sr *airlockv1alpha1.SessionRecord) (*airlockv1alpha1.SessionRecord, error) {
	return r.client.AirlockV1alpha1().SessionRecords(sr.Namespace).Update(ctx, sr, metav1.UpdateOptions{FieldManager: FieldManager})
}

// MoveRecords makes owner the owner of every record segment in namespace that from owns
// (docs/record.md §2.5): the claim controller moves a claim's records to its kept workspace's Job
// before it deletes the claim, and a kept workspace's records to the claim that resumes it
// before it deletes the Job. Each move is an Update conditional on the segment's
// resourceVersion (its metadata only: the API server's rules on a segment's spec all hold); an
// error leaves the caller to try again (a move done twice is no move).
func (c *Controller) MoveRecords(ctx context.Context, namespace string, from types.UID, owner metav1.OwnerReference) error {
	return moveRecords(ctx, c.records, namespace, from, owner)
}

func moveRecords(ctx context.Context, records recordControl, namespace string, from types.UID, owner metav1.OwnerReference) error {
	var list []airlockv1alpha1.SessionRecord
	for _, selector := range recordstore.OwnerSelectors(from) {
		some, err := records.List(ctx, namespace, selector)
		if err != nil {
			return fmt.Errorf("listing the records in %s: %w", namespace, err)
		}
		list = append(list, some...)
	}
	// The segments of every earlier session of the workspace move too (a resumed workspace's
	// records follow it), so a workspace resumed many times has many: they are moved
	// moveParallel at a time, not one round trip after another.
	var (
		wg    sync.WaitGroup
		slots = make(chan struct{}, moveParallel)
		errs  = make([]error, len(list))
		moved atomic.Int32
	)
	for i := range list {
		sr := &list[i]
		if !ownedBy(sr, from) {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if _, err := records.Update(ctx, recordstore.OwnedBy(sr, owner)); err != nil && !apierrors.IsNotFound(err) {
				errs[i] = fmt.Errorf("moving record segment %s to %s %s: %w", sr.Name, owner.Kind, owner.Name, err)
				return
			}
			moved.Add(1)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if moved := moved.Load(); moved > 0 {
		klog.FromContext(ctx).V(2).Info("Moved record segments", "namespace", namespace, "count", moved, "ownerKind", owner.Kind, "owner", owner.Name)
	}
	return nil
}

// moveParallel is how many segments a move updates at once.
const moveParallel = 16

func ownedBy(sr *airlockv1alpha1.SessionRecord, uid types.UID) bool {
	for _, o := range sr.OwnerReferences {
		if o.UID == uid {
			return true
		}
	}
	return false
}
