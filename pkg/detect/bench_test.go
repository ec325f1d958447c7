package detect_test

import (
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// BenchmarkDetectAll is one evaluation of every default detector on one
// busy replica whose window holds 65 minutes of 5-second scrapes of a
// current release (about 300 series). Report: ns/op per replica and round.
func BenchmarkDetectAll(b *testing.B) {
	store, now := fullEngine().run(b, detect.DefaultConfig())
	ds, err := detect.New(detect.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		store.View("sglang-0", func(w detect.Window) {
			for _, d := range ds {
				d.Detect(w, now)
			}
		})
	}
}

// BenchmarkDetectEach is the same per detector, to see which one costs.
func BenchmarkDetectEach(b *testing.B) {
	store, now := fullEngine().run(b, detect.DefaultConfig())
	ds, _ := detect.New(detect.DefaultConfig())
	for _, d := range ds {
		b.Run(string(d.Class()), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				store.View("sglang-0", func(w detect.Window) { d.Detect(w, now) })
			}
		})
	}
}
