// Package golden holds the golden pages: for every incident class, the
// trigger and the resolve the real path sends (testdata/events, written by
// pkg/detect's TestGoldenPageEvents from its scenario windows through the
// detectors, the assessment and the alert tracker), rendered by each
// integration (log text, Slack Block Kit, PagerDuty Events v2) into
// testdata/pages and read by a test that checks what an on-call engineer
// relies on: a headline, no "n/a", nothing said twice, one unit style,
// links, a triage that agrees with the evidence, a resolve that shows
// recovered values beside the peak.
package golden
