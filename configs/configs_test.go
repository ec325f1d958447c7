package configs_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/configs"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Every example must load and validate, so examples cannot rot.
func TestEveryExampleLoadsAndValidates(t *testing.T) {
	files := configs.Files()
	if len(files) < 2 {
		t.Fatalf("expected watchdog.yaml and demo.yaml, got %d files", len(files))
	}
	for name, data := range files {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse(config.Default(), data)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Targets) == 0 { // the demo adds its own targets
				cfg.Targets = []config.Target{{Name: "t", URL: "http://127.0.0.1:30000"}}
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// watchdog.yaml documents the defaults: decoding it over an empty config
// must give exactly Default(), so the documented values cannot drift from
// the code.
func TestWatchdogYAMLStatesTheDefaults(t *testing.T) {
	got, err := config.Parse(config.Config{}, configs.Files()["watchdog.yaml"])
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	if len(got.Targets) != 0 {
		t.Fatalf("the example lists live targets: %+v", got.Targets)
	}
	got.Targets, want.Targets = nil, nil
	// An empty list or map in the file decodes as empty, the default's is
	// nil: the same setting.
	normalize := func(c *config.Config) { emptyToNil(reflect.ValueOf(c).Elem()) }
	normalize(&got)
	normalize(&want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("configs/watchdog.yaml differs from config.Default():\n got  %+v\n want %+v", got, want)
	}
}

// emptyToNil sets every empty slice and map reachable from v (exported
// fields, elements, pointers) to nil.
func emptyToNil(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			emptyToNil(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				emptyToNil(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 && !v.IsNil() && v.CanSet() {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		for i := range v.Len() {
			emptyToNil(v.Index(i))
		}
	case reflect.Map:
		if v.Len() == 0 && !v.IsNil() && v.CanSet() {
			v.Set(reflect.Zero(v.Type()))
		}
	}
}

// A page's triage line must describe the incident the page is about: its
// range may not reach further back than the range of any detector whose
// pages carry it, or its means are mostly the healthy minutes before.
func TestTriageReadsNoFurtherBackThanItsDetectors(t *testing.T) {
	for name, data := range configs.Files() {
		cfg, err := config.Parse(config.Default(), data)
		if err != nil {
			t.Fatal(err)
		}
		d := cfg.Detectors
		for class, rng := range map[string]time.Duration{
			"preempt_storm":   detect.Get[detect.PreemptStormConfig](d).Range,
			"cache_collapse":  detect.Get[detect.CacheCollapseConfig](d).Range,
			"decode_slowdown": detect.Get[detect.DecodeSlowdownConfig](d).Range,
			"kv_saturation":   detect.Get[detect.KVSaturationConfig](d).Range,
			"queue_latency":   detect.Get[detect.QueueLatencyConfig](d).Range,
			"lora_thrash":     detect.Get[detect.LoraThrashConfig](d).Range,
		} {
			if d.Triage.Range > rng {
				t.Errorf("%s: triage.range %s is longer than %s.range %s", name, d.Triage.Range, class, rng)
			}
		}
	}
}
