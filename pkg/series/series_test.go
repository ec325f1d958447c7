package series

import (
	"reflect"
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
