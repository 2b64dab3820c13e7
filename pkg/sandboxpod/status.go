package sandboxpod

// What a sandbox pod's status says: whether it is ready, why it cannot start, whether it ended.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

const (
	// ReasonEvicted is the kubelet's reason of an evicted pod (and its event's).
	ReasonEvicted = "Evicted"
	// messageEvicted says which pod was evicted, and the kubelet's message.
	messageEvicted = "pod %s was evicted: %s"
)

// failingWaitingReasons are the container waiting reasons that fail a Binding claim at once.
var failingWaitingReasons = map[string]bool{
	"ImagePullBackOff":           true,
	"ErrImagePull":               true,
	"CrashLoopBackOff":           true,
	"CreateContainerConfigError": true,
	"InvalidImageName":           true,
}

// ReadyPod returns a pod of the claim that is Ready, has an IP and is not being deleted, or nil.
func ReadyPod(pods []*corev1.Pod) *corev1.Pod {
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
			continue
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return pod
			}
		}
	}
	return nil
}

// Failure returns the reason and message of a container that cannot start, or of a pod the
// kubelet evicted.
func Failure(pods []*corev1.Pod) (string, string) {
	if pod := EvictedPod(pods); pod != nil {
		return ReasonEvicted, fmt.Sprintf(messageEvicted, pod.Name, pod.Status.Message)
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		statuses := append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
		for _, s := range statuses {
			if w := s.State.Waiting; w != nil && failingWaitingReasons[w.Reason] {
				message := w.Message
				if message == "" {
					message = fmt.Sprintf("container %s of pod %s: %s", s.Name, pod.Name, w.Reason)
				}
				return w.Reason, message
			}
		}
	}
	return "", ""
}

// EvictedPod returns the newest of the pods that the kubelet evicted and says so in their status
// (phase Failed, reason Evicted), or nil.
func EvictedPod(pods []*corev1.Pod) *corev1.Pod {
	if pod := TerminatedPod(pods); pod != nil && pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == ReasonEvicted {
		return pod
	}
	return nil
}

// TerminatedPod returns the newest of the claim's pods that ended (Succeeded or Failed: a sandbox
// pod only ends when something stopped it, an eviction above all), or nil.
func TerminatedPod(pods []*corev1.Pod) *corev1.Pod {
	var newest *corev1.Pod
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&pod.CreationTimestamp) {
			newest = pod
		}
	}
	return newest
}

// Unschedulable returns the scheduler's message when a pod of the claim is unschedulable.
func Unschedulable(pods []*corev1.Pod) string {
	for _, pod := range pods {
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				if cond.Message != "" {
					return cond.Message
				}
				return "the sandbox pod cannot be scheduled"
			}
		}
	}
	return ""
}

// Ended says whether a pod has ended (Succeeded or Failed): it never runs again.
func Ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
