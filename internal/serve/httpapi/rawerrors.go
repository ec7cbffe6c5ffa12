package httpapi

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
)

// goErrorHeaders is what net/http's server writes, after its status line,
// when it refuses a request before any handler runs (headers over
// MaxHeaderBytes, a malformed request line or header): a plain-text answer
// written to the connection in one Write.
const goErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// ProblemListener returns ln with every connection's answers from net/http
// itself (431 for headers or a path over the server's MaxHeaderBytes, 400
// for a request that does not parse) rewritten as problem+json, as every
// other error of tokend's: headers_too_large and invalid_request. Answers
// written by handlers pass untouched; they never take that form (a
// handler's answer carries a Date header).
func ProblemListener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

type problemConn struct {
	net.Conn
}

func (c *problemConn) Write(b []byte) (int, error) {
	if out, ok := rewriteGoError(b); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// rewriteGoError returns the problem+json answer for b when b is one of
// net/http's own plain-text refusals of status 400 or 431.
func rewriteGoError(b []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(b, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 4 {
		return nil, false
	}
	line, body, ok := bytes.Cut(rest, []byte(goErrorHeaders))
	if !ok || bytes.ContainsAny(line, "\r\n") {
		return nil, false
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil {
		return nil, false
	}
	var p Problem
	switch status {
	case 431:
		p = Problem{Status: status, Code: "headers_too_large", Title: "Request headers too large",
			Detail: "the request line and headers (a long path or query included) are over the server's bound; nothing was read"}
	case 400:
		p = Problem{Status: status, Code: "invalid_request", Title: "Invalid request",
			Detail: "the request does not parse as HTTP/1.1: " + string(bytes.TrimPrefix(body, []byte("400 Bad Request: ")))}
	default:
		return nil, false
	}
	p.Type = problemTypePrefix + p.Code
	j, _ := json.Marshal(p) // strings and an int
	var out bytes.Buffer
	out.WriteString("HTTP/1.1 " + string(line) + "\r\nContent-Type: application/problem+json\r\nContent-Length: " + strconv.Itoa(len(j)) + "\r\nConnection: close\r\n\r\n")
	out.Write(j)
	return out.Bytes(), true
}
