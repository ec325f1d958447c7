package leader

import (
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ServiceAccountTokenFile is the pod's API token.
const ServiceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// InCluster reports whether the process runs in a Kubernetes pod with a
// service account: the API server's address is in the environment and the
// token is mounted.
func InCluster() bool {
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" || os.Getenv("KUBERNETES_SERVICE_PORT") == "" {
		return false
	}
	_, err := os.Stat(ServiceAccountTokenFile)
	return err == nil
}

// Client rate limits. client-go's default (5 requests/s, burst 10) is too
// tight for the state ConfigMap: every queued and every delivered
// notification is one write per integration.
const (
	clientQPS   = 20
	clientBurst = 40
)

// NewInClusterClient builds a clientset from the pod's service account.
// userAgent names the component in the API server's audit log, e.g.
// "sglang-watchdog/leader-election". Build one client for leader election
// and another for the state store, so that a burst of state writes can
// never delay a lease renewal behind the client's rate limiter.
func NewInClusterClient(userAgent string) (kubernetes.Interface, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes in-cluster config: %w", err)
	}
	cfg.UserAgent = userAgent
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}
