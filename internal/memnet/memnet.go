// Package memnet is an in-memory network of net.Pipe connections. A client
// and a server that really speak HTTP over it can run inside a
// testing/synctest bubble: a goroutine blocked on a socket is not durably
// blocked, so the bubble's clock would never advance, while one blocked on
// a pipe is.
package memnet

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// firstPort is where ports for ":0" listeners start, in the ephemeral range
// so they read like the ports the operating system hands out.
const firstPort = 40000

// backlog is how many dialled connections wait for Accept before a dial
// blocks, as a TCP accept queue.
const backlog = 64

// Network is a set of listeners addressed by "host:port". The zero value is
// not usable; call New. All methods are safe for concurrent use.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*listener
	conns     map[*conn]struct{}
	nextPort  int
	closed    bool
}

// New returns an empty network.
func New() *Network {
	return &Network{listeners: map[string]*listener{}, conns: map[*conn]struct{}{}, nextPort: firstPort}
}

// Listen binds address ("host:port"; port 0 picks a free one) on the
// network, with the signature of net.Listen. Only stream networks ("tcp",
// "tcp4", "tcp6") exist.
func (n *Network) Listen(network, address string) (net.Listener, error) {
	if err := checkNetwork(network); err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.ErrClosed}
	}
	if port == "0" || port == "" {
		for {
			port = strconv.Itoa(n.nextPort)
			n.nextPort++
			if n.listeners[net.JoinHostPort(host, port)] == nil {
				break
			}
		}
	}
	addr := Addr{Net: network, Address: net.JoinHostPort(host, port)}
	if n.listeners[addr.Address] != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: addr, Err: &os.SyscallError{Syscall: "bind", Err: syscall.EADDRINUSE}}
	}
	l := &listener{net: n, addr: addr, accept: make(chan *conn, backlog), done: make(chan struct{})}
	n.listeners[addr.Address] = l
	return l, nil
}

// DialContext connects to the listener bound at address, with the signature
// of net.Dialer.DialContext. Without a listener there it fails with
// ECONNREFUSED, as TCP does, so callers classify it the same way.
func (n *Network) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if err := checkNetwork(network); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	raddr := Addr{Net: network, Address: address}
	refused := &net.OpError{Op: "dial", Net: network, Addr: raddr, Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	n.mu.Lock()
	l := n.listeners[address]
	if l == nil || n.closed {
		n.mu.Unlock()
		return nil, refused
	}
	port := n.nextPort
	n.nextPort++
	client, server := net.Pipe()
	laddr := Addr{Net: network, Address: net.JoinHostPort("memnet-client", strconv.Itoa(port))}
	c := &conn{Conn: client, net: n, local: laddr, remote: raddr}
	s := &conn{Conn: server, net: n, local: raddr, remote: laddr}
	n.conns[c], n.conns[s] = struct{}{}, struct{}{}
	n.mu.Unlock()

	select {
	case l.accept <- s:
		select {
		case <-l.done:
			// Closed while this dial was queueing: nobody will accept it.
			l.drain()
		default:
		}
		return c, nil
	case <-l.done:
		c.Close()
		s.Close()
		return nil, refused
	case <-ctx.Done():
		c.Close()
		s.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Addr: raddr, Err: ctx.Err()}
	}
}

// Close closes every listener and every open connection, so the goroutines
// serving or reading them return.
func (n *Network) Close() error {
	n.mu.Lock()
	n.closed = true
	ls := make([]*listener, 0, len(n.listeners))
	for _, l := range n.listeners {
		ls = append(ls, l)
	}
	cs := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		cs = append(cs, c)
	}
	n.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, c := range cs {
		c.Close()
	}
	return nil
}

func checkNetwork(network string) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
		return nil
	}
	return net.UnknownNetworkError(network)
}

// Addr is an address on a Network.
type Addr struct {
	Net     string // "tcp", as given to Listen or DialContext
	Address string // "host:port"
}

func (a Addr) Network() string { return a.Net }
func (a Addr) String() string  { return a.Address }

type listener struct {
	net       *Network
	addr      Addr
	accept    chan *conn
	done      chan struct{}
	closeOnce sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: l.addr.Net, Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close unbinds the address and closes the connections still waiting to be
// accepted, as closing a TCP listener resets its accept queue.
func (l *listener) Close() error {
	first := false
	l.closeOnce.Do(func() {
		first = true
		l.net.mu.Lock()
		if l.net.listeners[l.addr.Address] == l {
			delete(l.net.listeners, l.addr.Address)
		}
		l.net.mu.Unlock()
		close(l.done)
	})
	if !first {
		return &net.OpError{Op: "close", Net: l.addr.Net, Addr: l.addr, Err: net.ErrClosed}
	}
	l.drain()
	return nil
}

// drain closes the connections waiting in the accept queue.
func (l *listener) drain() {
	for {
		select {
		case c := <-l.accept:
			c.Close()
		default:
			return
		}
	}
}

func (l *listener) Addr() net.Addr { return l.addr }

// conn is one end of a pipe with the addresses of the network.
type conn struct {
	net.Conn
	net           *Network
	local, remote Addr
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) Close() error {
	c.net.mu.Lock()
	delete(c.net.conns, c)
	c.net.mu.Unlock()
	return c.Conn.Close()
}
