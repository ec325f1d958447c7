package fleetbench

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A child's port comes from below the ephemeral range, where the fleet's
// outgoing connections cannot take it before the child binds.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatalf("the fleet bench runs on Linux: %v", err)
	}
	low, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		addr, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if p >= low || p < 1024 {
			t.Fatalf("freePort gave %s; want a port in [1024, %d)", addr, low)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("freePort gave %s, which cannot be bound: %v", addr, err)
		}
		ln.Close()
	}
}
