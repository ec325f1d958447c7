package leader

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
)

// Defaults, those of Kubernetes' own controllers.
const (
	DefaultLeaseName      = "sglang-watchdog"
	DefaultStateConfigMap = "sglang-watchdog-state"
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
)

// MinLeaseMargin is the least lease_duration - renew_deadline. A follower
// notices a renewal only when the Lease record changes, and client-go
// compares the record with its times in whole seconds: several renewals
// within one second look like one. So a follower may date the leader's
// last renewal up to one second too early, and take over lease_duration
// after that; the leader, which stops renew_deadline after its last
// renewal, must have stopped by then.
const MinLeaseMargin = time.Second

// Config is the "ha" section: leader election between watchdog copies.
// Zero fields take the defaults.
type Config struct {
	// Enabled turns on leader election: only the leader delivers
	// notifications and writes the shared state ConfigMap; the others
	// scrape and evaluate so that a takeover is instant.
	Enabled bool `yaml:"enabled"`
	// LeaseName is the coordination.k8s.io Lease the copies compete for.
	LeaseName string `yaml:"lease_name"`
	// Namespace of the Lease and the state ConfigMap; "" is the pod's own
	// namespace (POD_NAMESPACE, else the service account's), else "default".
	Namespace string `yaml:"namespace"`
	// LeaseDuration is how long followers wait after the last renewal they
	// saw before taking over: the failover time after a crash. Whole
	// seconds, because the Lease stores it in seconds.
	LeaseDuration time.Duration `yaml:"lease_duration"`
	// RenewDeadline is how long the leader keeps trying to renew before it
	// stops leading (and stops paging). At least MinLeaseMargin below
	// lease_duration, so a leader cut off from the API server stops before
	// anyone else starts.
	RenewDeadline time.Duration `yaml:"renew_deadline"`
	// RetryPeriod is the interval between renewals and acquisition attempts.
	RetryPeriod time.Duration `yaml:"retry_period"`
	// Identity overrides this copy's name in the Lease; "" is the pod name
	// (HOSTNAME), see DefaultIdentity.
	Identity string `yaml:"identity"`
	// StateConfigMap holds the notification outboxes, incident records and
	// firing alerts the leader writes and a new leader reloads.
	StateConfigMap string `yaml:"state_configmap"`
}

// DefaultConfig is disabled with production timings.
func DefaultConfig() Config {
	return Config{
		LeaseName:      DefaultLeaseName,
		LeaseDuration:  DefaultLeaseDuration,
		RenewDeadline:  DefaultRenewDeadline,
		RetryPeriod:    DefaultRetryPeriod,
		StateConfigMap: DefaultStateConfigMap,
	}
}

// WithDefaults fills the zero fields, except Namespace and Identity, which
// depend on the pod (see OwnNamespace and DefaultIdentity).
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.LeaseName == "" {
		c.LeaseName = d.LeaseName
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = d.LeaseDuration
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = d.RenewDeadline
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = d.RetryPeriod
	}
	if c.StateConfigMap == "" {
		c.StateConfigMap = d.StateConfigMap
	}
	return c
}

// Validate reports every problem, each with its YAML path under prefix
// (the daemon's config calls it with "ha"). Zero values mean "default".
func (c Config) Validate(prefix string) error {
	var errs []error
	add := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", prefix, path, fmt.Sprintf(format, a...)))
	}
	for _, f := range []struct {
		path string
		d    time.Duration
	}{{"lease_duration", c.LeaseDuration}, {"renew_deadline", c.RenewDeadline}, {"retry_period", c.RetryPeriod}} {
		if f.d < 0 {
			add(f.path, "must not be negative, got %s", f.d)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	d := c.WithDefaults()
	if d.LeaseDuration < time.Second || d.LeaseDuration%time.Second != 0 {
		add("lease_duration", "must be whole seconds, at least 1s (the Lease stores seconds), got %s", d.LeaseDuration)
	}
	if d.LeaseDuration-d.RenewDeadline < MinLeaseMargin {
		add("renew_deadline", "%s must be at least %s below lease_duration %s, so that a leader cut off from the API server stops paging before another copy takes over (copies see renewals at the Lease's one-second resolution)",
			d.RenewDeadline, MinLeaseMargin, d.LeaseDuration)
	}
	if float64(d.RenewDeadline) <= leaderelection.JitterFactor*float64(d.RetryPeriod) {
		add("retry_period", "%s is too long for renew_deadline %s: renew_deadline must exceed %.1f × retry_period", d.RetryPeriod, d.RenewDeadline, leaderelection.JitterFactor)
	}
	if errs := validation.IsDNS1123Subdomain(d.LeaseName); len(errs) > 0 {
		add("lease_name", "%q is not a valid object name: %s", d.LeaseName, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(d.StateConfigMap); len(errs) > 0 {
		add("state_configmap", "%q is not a valid object name: %s", d.StateConfigMap, strings.Join(errs, "; "))
	}
	if c.Namespace != "" {
		if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
			add("namespace", "%q is not a valid namespace: %s", c.Namespace, strings.Join(errs, "; "))
		}
	}
	if c.Identity != "" && strings.TrimSpace(c.Identity) != c.Identity {
		add("identity", "%q has leading or trailing white space", c.Identity)
	}
	return errors.Join(errs...)
}

// ServiceAccountNamespaceFile is where a pod finds its namespace.
const ServiceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// OwnNamespace is the pod's namespace: POD_NAMESPACE (the downward API),
// else the service account's namespace file, else "default". getenv and
// readFile are os.Getenv and os.ReadFile in main.
func OwnNamespace(getenv func(string) string, readFile func(string) ([]byte, error)) string {
	if ns := strings.TrimSpace(getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := readFile(ServiceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}

// DefaultIdentity is this copy's name in the Lease: HOSTNAME (the pod name
// in Kubernetes), else the OS host name. hostname is os.Hostname in main.
func DefaultIdentity(getenv func(string) string, hostname func() (string, error)) (string, error) {
	if h := strings.TrimSpace(getenv("HOSTNAME")); h != "" {
		return h, nil
	}
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("leader identity: %w", err)
	}
	if h = strings.TrimSpace(h); h == "" {
		return "", errors.New("leader identity: empty host name; set ha.identity")
	}
	return h, nil
}

// Resolve fills Namespace and Identity from the pod when they are empty
// (with OwnNamespace and DefaultIdentity on the real environment) and the
// other fields with the defaults.
func (c Config) Resolve() (Config, error) {
	c = c.WithDefaults()
	if c.Namespace == "" {
		c.Namespace = OwnNamespace(os.Getenv, os.ReadFile)
	}
	if c.Identity == "" {
		id, err := DefaultIdentity(os.Getenv, os.Hostname)
		if err != nil {
			return c, err
		}
		c.Identity = id
	}
	return c, nil
}
