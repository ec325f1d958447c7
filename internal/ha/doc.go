// Package ha is the watchdog's takeover sequence in HA mode: when the
// leader Lease changes hands, the copy that gains it makes its state store
// writable, activates notification delivery and continues the incidents the
// old leader opened; the copy that loses it stops writing and delivering at
// once. The sequence lives here, apart from main and from each
// collaborator, because its order is what makes a failover safe (no two
// copies writing, no incident lost or paged twice), and it is that order the
// HA tests drive: two copies on one fake Kubernetes API, one fake Slack and
// one fake PagerDuty, evaluating through the real assessment, alert and
// notification path.
package ha
