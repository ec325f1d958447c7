package series

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// Pod.Equal tells two statuses apart by any one field: discovery publishes
// a status change only when Equal says it changed.
func TestPodEqualComparesEveryField(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	base := func() *Pod {
		return &Pod{Namespace: "llm", Name: "a", Phase: "Running", Reason: "r", Message: "m", Ready: true, Created: at, Started: at,
			Restarts: 1, Waiting: "w", LastTermination: Termination{Reason: "OOMKilled"}, WaitingMessage: "wm", Image: "img",
			Unschedulable: "u", Node: &Node{Name: "n", Conditions: []NodeCondition{{Type: NodeReady, Status: "False"}}},
			Events: []PodEvent{{Reason: "Unhealthy", Count: 2, Last: at}}}
	}
	if !base().Equal(base()) {
		t.Fatal("equal pods differ")
	}
	var nilPod *Pod
	if base().Equal(nil) || !nilPod.Equal(nil) {
		t.Error("nil handling")
	}
	typ := reflect.TypeFor[Pod]()
	for i := range typ.NumField() {
		p := base()
		f := reflect.ValueOf(p).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Pointer, reflect.Slice:
			f.SetZero()
		case reflect.Struct:
			if f.Type() == reflect.TypeFor[time.Time]() {
				f.Set(reflect.ValueOf(at.Add(time.Second)))
			} else {
				f.SetZero()
			}
		default:
			t.Fatalf("field %s: kind %s not covered by this test", typ.Field(i).Name, f.Kind())
		}
		if base().Equal(p) {
			t.Errorf("pods differing in %s are Equal", typ.Field(i).Name)
		}
	}
	for name, mod := range map[string]func(p *Pod){
		"node cordon":      func(p *Pod) { p.Node.Cordoned = true },
		"node condition":   func(p *Pod) { p.Node.Conditions[0].Since = at },
		"node name":        func(p *Pod) { p.Node.Name = "m" },
		"event count":      func(p *Pod) { p.Events[0].Count++ },
		"event added":      func(p *Pod) { p.Events = append(p.Events, PodEvent{Reason: "BackOff"}) },
		"node of one only": func(p *Pod) { p.Node = nil },
	} {
		p := base()
		mod(p)
		if base().Equal(p) {
			t.Errorf("pods differing in %s are Equal", name)
		}
	}
}

// A worker URL becomes the address that names its replica and joins it
// to its engine target: no scheme, credentials or default port.
func TestWorkerAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"http://127.0.0.1:46571":            "127.0.0.1:46571",
		"http://127.0.0.1:46571/":           "127.0.0.1:46571",
		"https://user:secret@Engine-0:443/": "engine-0",
		"http://engine-0:80":                "engine-0",
		"http://[fd00::1]:30000":            "[fd00::1]:30000",
		"http://[fd00::1]":                  "[fd00::1]",
		"grpc://10.0.0.3:30001/v1":          "10.0.0.3:30001/v1",
		"10.0.0.4:30000":                    "10.0.0.4:30000",
		"":                                  "",
	} {
		if got := WorkerAddress(addr); got != want {
			t.Errorf("WorkerAddress(%q) = %q, want %q", addr, got, want)
		}
		if strings.Contains(WorkerAddress(addr), "secret") {
			t.Errorf("WorkerAddress(%q) keeps the credentials", addr)
		}
	}
}
