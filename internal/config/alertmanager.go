package config

import (
	"errors"
	"fmt"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/alertmanager"
)

// Alertmanager is notify.alertmanager: the Alertmanagers of one cluster
// the watchdog posts its incidents to, the HTTP client configuration
// (Prometheus's http_client: basic auth, authorization, TLS, proxy) and
// the resend interval. No URL: the integration is off.
type Alertmanager = alertmanager.Config

// validateAlertmanager reports every problem of notify.alertmanager, each
// with its full YAML path.
func validateAlertmanager(a Alertmanager) error {
	err := a.Validate()
	if err == nil {
		return nil
	}
	var errs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			errs = append(errs, fmt.Errorf("notify.alertmanager.%w", e))
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("notify.alertmanager.%w", err)
}
