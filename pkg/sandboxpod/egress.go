package sandboxpod

// Egress through airlock's gateway (docs/egress.md, "What a sandbox with egress gets"). A class
// with egress gets, frozen into its claim's record with the gateway the operator names
// (--egress-gateway-service), a NetworkPolicy rule to the gateway's pods on its port (nothing
// else new: no DNS at all, names are resolved by the gateway; a class with egress may not have
// allowedServices, which would need DNS), the proxy variables (the claim's proxy
// credential comes from its token Secret through a secretKeyRef, never written in the pod spec)
// and, when the operator names a CA bundle, the bundle mounted with the variables the usual
// toolchains read. Nothing a class writes may repeat or override any of it: ClassConflict
// refuses a class whose env or volumes take these names, and the builder drops them anyway.

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

const (
	// ProxyKey is the key of the claim's proxy credential in its token Secret.
	ProxyKey = "proxy"
	// ProxyCredentialEnv is the variable that holds the proxy credential (from the Secret); the
	// proxy URLs refer to it as $(AIRLOCK_EGRESS_CREDENTIAL), expanded by the kubelet.
	ProxyCredentialEnv = "AIRLOCK_EGRESS_CREDENTIAL"
	// EgressCAVolumeName is the CA bundle's volume; class volumes may not use it.
	EgressCAVolumeName = "airlock-egress-ca"
	// EgressCAMountPath is where the CA bundle is mounted.
	EgressCAMountPath = "/var/run/airlock/egress-ca"
	// EgressCAKey is the bundle's key in its ConfigMap and its file name.
	EgressCAKey = "ca.crt"
	// EgressCAFile is the bundle's path in the sandbox.
	EgressCAFile = EgressCAMountPath + "/" + EgressCAKey
	// NoProxy is the sandbox's NO_PROXY: its own loopback and in-cluster names (which only
	// allowedServices let it reach, directly).
	NoProxy = "localhost,127.0.0.1,::1,.svc,.cluster.local"
)

// proxyVars are the variables that name the proxy.
var proxyVars = []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"}

// noProxyVars name what is reached directly.
var noProxyVars = []string{"NO_PROXY", "no_proxy"}

// caVars are the variables the usual toolchains read for a CA bundle: OpenSSL and Go
// (SSL_CERT_FILE), git, Node, Python requests, pip, curl, cargo, npm, Deno, the AWS SDKs.
var caVars = []string{"SSL_CERT_FILE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE",
	"PIP_CERT", "CURL_CA_BUNDLE", "CARGO_HTTP_CAINFO", "NPM_CONFIG_CAFILE", "DENO_CERT", "AWS_CA_BUNDLE"}

// EgressEnvNames are every variable the operator sets in a sandbox with egress; a class with
// egress may set none of them (ClassConflict).
func EgressEnvNames() []string {
	return slices.Concat([]string{ProxyCredentialEnv}, proxyVars, noProxyVars, caVars)
}

// GatewayRef is the operator's egress gateway (--egress-gateway-service namespace/name:port) and
// the ConfigMap that holds the sandboxes' CA bundle (--egress-ca-bundle-configmap, optional).
type GatewayRef struct {
	Namespace         string
	Name              string
	Port              int32
	CABundleConfigMap string
}

// ParseGatewayRef reads namespace/name:port.
func ParseGatewayRef(s string) (*GatewayRef, error) {
	nsName, port, ok := strings.Cut(s, ":")
	ns, name, ok2 := strings.Cut(nsName, "/")
	if !ok || !ok2 || ns == "" || name == "" {
		return nil, fmt.Errorf("must be namespace/name:port, like airlock-system/airlock-egress:3128, got %q", s)
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("port %q must be a number from 1 to 65535", port)
	}
	return &GatewayRef{Namespace: ns, Name: name, Port: int32(p)}, nil
}

// FreezeGateway returns the gateway a claim with egress is frozen with: the Service ref names,
// found (svc, nil when it does not exist) with a cluster IP, a selector and the port. Otherwise
// it says why no claim with egress can be built now: the class is refused rather than built
// without its gateway (fail closed: nothing is widened, nothing half-built).
func FreezeGateway(ref *GatewayRef, svc *corev1.Service) (*airlockv1alpha1.EgressGateway, string) {
	if ref == nil {
		return nil, "the class has egress and this operator has no egress gateway (--egress-gateway-service is not set)"
	}
	name := ref.Namespace + "/" + ref.Name
	if svc == nil {
		return nil, fmt.Sprintf("the egress gateway's Service %s does not exist", name)
	}
	addr, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return nil, fmt.Sprintf("the egress gateway's Service %s has no cluster IP (%q): a sandbox has no DNS server to find it by name", name, svc.Spec.ClusterIP)
	}
	if len(svc.Spec.Selector) == 0 {
		return nil, fmt.Sprintf("the egress gateway's Service %s has no selector: no pods for the sandbox's NetworkPolicy to name", name)
	}
	for _, p := range svc.Spec.Ports {
		if p.Port != ref.Port || p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			continue
		}
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 || target.Type == intstr.String && target.StrVal == "" {
			target = intstr.FromInt32(p.Port)
		}
		return &airlockv1alpha1.EgressGateway{
			Namespace:         ref.Namespace,
			Service:           ref.Name,
			Address:           addr.String(),
			Port:              ref.Port,
			TargetPort:        target,
			PodSelector:       maps(svc.Spec.Selector),
			CABundleConfigMap: ref.CABundleConfigMap,
		}, ""
	}
	return nil, fmt.Sprintf("the egress gateway's Service %s has no TCP port %d", name, ref.Port)
}

func maps(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// egressConflict says why the class's egress cannot be built, or "": no host and no credential,
// allowedServices beside it (which would need DNS: docs/egress.md, "DNS"), or env or volumes that
// take what the operator sets. Whether the gateway compiles the class's host
// list is the compiler's (policy.CheckClass, which ClassConflict asks).
func egressConflict(class *airlockv1alpha1.SandboxClass) string {
	e := class.Spec.Egress
	if e == nil {
		return ""
	}
	if len(e.Hosts) == 0 && len(e.Credentials) == 0 {
		return fmt.Sprintf("SandboxClass %q: egress lists no host and no credential", class.Name)
	}
	if len(class.Spec.AllowedServices) > 0 {
		return fmt.Sprintf("SandboxClass %q: egress and allowedServices together: a sandbox with egress gets no DNS (kube-dns would carry any name past the gateway), so it could not find the Services; give sandboxes that need in-cluster Services a class without egress", class.Name)
	}
	reserved := EgressEnvNames()
	for _, env := range class.Spec.Env {
		if slices.Contains(reserved, env.Name) {
			return fmt.Sprintf("SandboxClass %q: env %s is the operator's in a sandbox with egress", class.Name, env.Name)
		}
	}
	for _, v := range class.Spec.Volumes {
		if v.Name == EgressCAVolumeName || pathsOverlap(v.MountPath, EgressCAMountPath) {
			return fmt.Sprintf("SandboxClass %q: volume %q takes the name or a path (%s) of the egress CA bundle", class.Name, v.Name, EgressCAMountPath)
		}
	}
	return ""
}

// pathsOverlap reports whether one of two clean absolute paths is the other or holds it.
func pathsOverlap(a, b string) bool {
	a, b = strings.TrimRight(a, "/")+"/", strings.TrimRight(b, "/")+"/"
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// egressReady reports whether the record has egress with its gateway frozen: only then does the
// sandbox get anything of it. A record with egress and no gateway (none written by Freeze and
// the claim controller) gets nothing: fail closed.
func egressReady(record *airlockv1alpha1.FrozenSandbox) bool {
	return record.Egress != nil && record.Egress.Gateway.Address != "" && record.Egress.Gateway.Port > 0 && len(record.Egress.Gateway.PodSelector) > 0
}

// ProxyUsername is the proxy credential's username of the claim: <namespace>.<claim>.
func ProxyUsername(claim *airlockv1alpha1.SandboxClaim) string {
	return claim.Namespace + "." + claim.Name
}

// MemberProxyMarker begins the name part of a warm member's proxy username: no claim's name
// holds it (a claim's name is a DNS label), so the gateway tells a member's credential from a
// claim's by it (pkg/egress, ClusterClaims).
const MemberProxyMarker = "~"

// MemberProxyUsername is the proxy credential's username of the warm member pod
// namespace/member: <namespace>.~<member> (docs/egress.md, "Warm members of a class with
// egress"). Its password is claimtoken.DeriveMemberProxy of the pod; the gateway takes it as the
// credential of the claim that adopted the pod, and of no one before.
func MemberProxyUsername(namespace, member string) string {
	return namespace + "." + MemberProxyMarker + member
}

// egressEnv is the environment the operator sets in a sandbox when its record has egress: the
// proxy credential from the Secret secretName (a claim's token Secret, set by UseTokenSecret, or
// a warm member's key Secret), the proxy URLs that use it with username, NO_PROXY and the CA
// variables.
func egressEnv(username string, record *airlockv1alpha1.FrozenSandbox, secretName string) []corev1.EnvVar {
	if !egressReady(record) {
		return nil
	}
	gw := record.Egress.Gateway
	env := []corev1.EnvVar{{Name: ProxyCredentialEnv, ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: ProxyKey},
	}}}
	url := "http://" + username + ":$(" + ProxyCredentialEnv + ")@" + net.JoinHostPort(gw.Address, strconv.Itoa(int(gw.Port)))
	for _, name := range proxyVars {
		env = append(env, corev1.EnvVar{Name: name, Value: url})
	}
	for _, name := range noProxyVars {
		env = append(env, corev1.EnvVar{Name: name, Value: NoProxy})
	}
	if gw.CABundleConfigMap != "" {
		for _, name := range caVars {
			env = append(env, corev1.EnvVar{Name: name, Value: EgressCAFile})
		}
	}
	return env
}

// egressVolume is the CA bundle's volume and mount, when the record's gateway names a bundle.
func egressVolume(record *airlockv1alpha1.FrozenSandbox) (*corev1.Volume, *corev1.VolumeMount) {
	if !egressReady(record) || record.Egress.Gateway.CABundleConfigMap == "" {
		return nil, nil
	}
	return &corev1.Volume{Name: EgressCAVolumeName, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: record.Egress.Gateway.CABundleConfigMap},
			Items:                []corev1.KeyToPath{{Key: EgressCAKey, Path: EgressCAKey}},
			DefaultMode:          ptr.To[int32](corev1.ConfigMapVolumeSourceDefaultMode),
		}}},
		&corev1.VolumeMount{Name: EgressCAVolumeName, MountPath: EgressCAMountPath, ReadOnly: true}
}

// withoutReserved returns the class's env without any variable the operator sets (ClassConflict
// refuses such a class; a record written past that check still never overrides the operator).
func withoutReserved(env []corev1.EnvVar, reserved []corev1.EnvVar) []corev1.EnvVar {
	if len(reserved) == 0 {
		return append([]corev1.EnvVar(nil), env...)
	}
	names := EgressEnvNames()
	out := make([]corev1.EnvVar, 0, len(env)+len(reserved))
	for _, e := range env {
		if !slices.Contains(names, e.Name) {
			out = append(out, e)
		}
	}
	return append(out, reserved...)
}
