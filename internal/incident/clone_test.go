package incident

import (
	"reflect"
	"testing"
)

// A Record handed out (the API, the workspace, the saved document) is
// read while the journal updates its own: clone shares no slice with
// it, whatever fields a Record gains.
func TestCloneSharesNoSlice(t *testing.T) {
	var r Record
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice && v.Type().Field(i).IsExported() {
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		}
	}
	c := r.clone()
	cv := reflect.ValueOf(c)
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Slice || !v.Type().Field(i).IsExported() {
			continue
		}
		if cv.Field(i).Pointer() == f.Pointer() {
			t.Errorf("clone shares Record.%s with the journal's record", v.Type().Field(i).Name)
		}
	}
}
