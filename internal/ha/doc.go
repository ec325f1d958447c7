// Package ha holds the high-availability acceptance tests: two watchdog
// copies share one fake Kubernetes API (the leader Lease and the state
// ConfigMap), one fake Slack and one fake PagerDuty, and are fed the same
// findings. Only the leader pages; when it stops, cleanly or not, the other
// takes over and continues the same Slack message and PagerDuty incident.
// It has no code of its own.
package ha
