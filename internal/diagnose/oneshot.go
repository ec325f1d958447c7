package diagnose

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Adapting the daemon's detectors to a one-shot observation.
//
// The daemon compares a recent Range (minutes) with a Baseline (an hour)
// before it. A one-shot only has the few scrapes it just took, so every
// detector's Range and Baseline are set to the observation's lookback
// (the span between the first and the last scrape, plus half an interval
// so the first scrape falls inside the range). There is no data before the
// first scrape, so every baseline measure comes back "not ok": detectors
// that have an absolute rule for a young replica without a baseline fall
// back to it (preempt_storm pages on its absolute retraction floor with a
// full KV pool); detectors that can only judge relative to a baseline stay
// silent, and the report lists them as "needs history".
//
// The fields are found by name (Range, Baseline of type time.Duration in
// every detector's section), so detectors added to detect.Config later are
// shortened too. If the shortened settings fail a detector's validation,
// that detector is switched off for the one-shot and reported as not
// judged, rather than failing the whole command.

// DetectorNote says whether a one-shot can judge a detector's class.
type DetectorNote struct {
	Class  detect.Class `json:"class"`
	Judged bool         `json:"judged"`
	Note   string       `json:"note"`
}

// oneShotVerdicts are the classes whose one-shot behaviour has been
// checked against their detector. A class missing here (a detector added
// later) is run and reported if it fires, with a note that its one-shot
// behaviour is not assessed.
var oneShotVerdicts = map[detect.Class]DetectorNote{
	detect.ReplicaDown: {Judged: true,
		Note: "judged: down when every scrape failed; a restart only if it happened between the scrapes"},
	detect.PreemptStorm: {Judged: true,
		Note: "judged on its absolute rule (retraction rate above the floor with a full KV pool); the baseline ratio needs history"},
	detect.CacheCollapse: {Judged: false,
		Note: "needs history: it compares the windowed hit rate with the same replica's hit rate before the drop — compare the hit rate above with what is normal for this model, or ask the daemon"},
	detect.RetryAvalanche: {Judged: false,
		Note: "needs history: arrival growth, amplification and failure growth are all relative to a baseline — look at the aborts and HTTP in-flight above, or ask the daemon"},

	// The classes below were assessed against their detectors' first
	// drafts; string literals keep this file independent of when their
	// constants land in pkg/detect.
	"kv_saturation": {Judged: false,
		Note: "needs history: a pinned pool pages only if it rose from its baseline or outputs grew longer than before — the KV usage above shows the level"},
	"engine_hang": {Judged: false,
		Note: "needs history: the progress counter must stay flat over a range longer than SGLang's 20 s health check — the layer verdict ('stuck') and the /health_generate probe above stand in"},
	"queue_latency": {Judged: false,
		Note: "needs history: TTFT p99 is compared with its baseline — the TTFT and queue wait above, and the layer verdict, show where the time goes"},
	"decode_slowdown": {Judged: false,
		Note: "needs history: inter-token latency is compared with its baseline at the same batch size — see the inter-token p99 above"},
	"lora_thrash": {Judged: false,
		Note: "needs history: latency jitter is compared with its baseline"},
	"pd_transfer_failure": {Judged: true,
		Note: "judged on its absolute failure-rate floor; the baseline ratio needs history"},
	"cold_start": {Judged: true,
		Note: "partly: judged from the process start time against the startup budget; 'demand not served' needs the daemon's longer watch"},
	"metrics_blind": {Judged: true,
		Note: "partly: a 404 on /metrics is judged; missing families need the daemon's grace period after a start"},
}

// OneShotConfig returns base adapted to a one-shot of samples scrapes
// covering lookback, the notes of the detectors it disabled, and an error
// only if no adaptation validates.
func OneShotConfig(base detect.Config, lookback time.Duration, samples int) (detect.Config, []DetectorNote, error) {
	cfg := base
	v := reflect.ValueOf(&cfg).Elem()
	durType := reflect.TypeFor[time.Duration]()
	for i := range v.NumField() {
		sec := v.Field(i)
		if sec.Kind() != reflect.Struct {
			continue
		}
		for _, name := range []string{"Range", "Baseline"} {
			if f := sec.FieldByName(name); f.IsValid() && f.CanSet() && f.Type() == durType {
				f.SetInt(int64(lookback))
			}
		}
	}
	// Down means every scrape of the observation failed.
	cfg.ReplicaDown.FailuresToPage = max(1, samples)
	// Releases without the retraction counter: the lossy gauge must be
	// non-zero in every scrape we have (at most the configured count).
	cfg.PreemptStorm.LegacyMinScrapes = max(1, min(cfg.PreemptStorm.LegacyMinScrapes, samples))

	var notes []DetectorNote
	for range v.NumField() + 1 {
		err := cfg.Validate()
		if err == nil {
			return cfg, notes, nil
		}
		disabled := false
		for key, msgs := range invalidSections(err) {
			if disableSection(v, key) {
				disabled = true
				notes = append(notes, DetectorNote{Class: detect.Class(key), Judged: false,
					Note: "not run: its settings cannot be shortened to a one-shot (" + strings.Join(msgs, "; ") + ")"})
			}
		}
		if !disabled {
			return base, nil, fmt.Errorf("detector settings for a one-shot of %s: %w", lookback, err)
		}
	}
	return base, nil, errors.New("detector settings for a one-shot: validation does not settle")
}

// validationPath matches the YAML path prefix of a detect.Config error.
var validationPath = regexp.MustCompile(`^detectors\.([a-z0-9_]+)\.`)

// invalidSections groups validation messages by detector section.
func invalidSections(err error) map[string][]string {
	out := map[string][]string{}
	for line := range strings.SplitSeq(err.Error(), "\n") {
		if m := validationPath.FindStringSubmatch(line); m != nil {
			out[m[1]] = append(out[m[1]], line)
		}
	}
	return out
}

// disableSection switches off the section whose yaml tag is key. Validate
// checks disabled sections too, so the section is also reset to its
// (valid) default; it does not run, so its values do not matter.
func disableSection(v reflect.Value, key string) bool {
	defaults := reflect.ValueOf(detect.DefaultConfig())
	for i := range v.NumField() {
		tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		if tag != key {
			continue
		}
		sec := v.Field(i)
		en := sec.FieldByName("Enabled")
		if !en.IsValid() || en.Kind() != reflect.Bool || !en.Bool() {
			return false
		}
		sec.Set(defaults.Field(i))
		sec.FieldByName("Enabled").SetBool(false)
		return true
	}
	return false
}

// detectorNotes describes every detector that runs.
func detectorNotes(ds []detect.Detector) []DetectorNote {
	out := make([]DetectorNote, 0, len(ds))
	for _, d := range ds {
		n, ok := oneShotVerdicts[d.Class()]
		if !ok {
			n = DetectorNote{Judged: true, Note: "runs with its ranges shortened to the observation; its one-shot behaviour is not assessed, so silence here is weak evidence"}
		}
		n.Class = d.Class()
		out = append(out, n)
	}
	return out
}
