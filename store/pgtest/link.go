package pgtest

import (
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
)

// Link is a TCP link to a test database that a test can cut and restore,
// as a network partition or a restarting database would: Down closes the
// listener and every connection through it; Up listens again on the same
// address.
type Link struct {
	t      testing.TB
	addr   string
	socket string
	url    string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

// NewLink opens a link to the database at dbURL (a URL from URL, whose
// host is the cluster's socket directory) and returns it up. Its URL
// reaches the same database through the link, with a 2-second connect
// timeout so that requests fail fast while it is down.
func NewLink(t testing.TB, dbURL string) *Link {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Query().Get("port")
	if port == "" {
		port = "5432"
	}
	l := &Link{t: t, addr: "127.0.0.1:0", socket: filepath.Join(u.Query().Get("host"), ".s.PGSQL."+port)}
	l.Up()
	t.Cleanup(l.Down)
	host, port, _ := net.SplitHostPort(l.addr)
	q := u.Query()
	q.Set("host", host)
	q.Set("port", port)
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	l.url = u.String()
	return l
}

// URL is the database URL through the link.
func (l *Link) URL() string { return l.url }

// Up (re)opens the link.
func (l *Link) Up() {
	l.t.Helper()
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		l.t.Fatal(err)
	}
	l.mu.Lock()
	l.ln, l.addr = ln, ln.Addr().String()
	l.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			pg, err := net.Dial("unix", l.socket)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, c, pg)
			l.mu.Unlock()
			go func() { _, _ = io.Copy(pg, c); pg.Close() }()
			go func() { _, _ = io.Copy(c, pg); c.Close() }()
		}
	}()
}

// Down cuts the link: no new connections, and every open one closed.
func (l *Link) Down() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		l.ln.Close()
	}
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}
