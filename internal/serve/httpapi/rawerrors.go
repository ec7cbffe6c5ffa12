package httpapi

import (
	"bytes"
	"net"
	"net/http"
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

// expectationFailed is how net/http's answer to an Expect header other
// than 100-continue starts; no handler of tokend answers 417.
const expectationFailed = "HTTP/1.1 417 Expectation Failed\r\n"

// rewriteGoError returns the problem+json answer for b when b is one of
// net/http's own refusals: 400, 431, 501 (a Transfer-Encoding other than
// chunked) and 505 (an HTTP version other than 1.x) in plain text, and
// 417 (an Expect other than 100-continue) empty.
func rewriteGoError(b []byte) ([]byte, bool) {
	if bytes.HasPrefix(b, []byte(expectationFailed)) && bytes.HasSuffix(b, []byte("\r\n\r\n")) && bytes.Contains(b, []byte("\r\nContent-Length: 0\r\n")) {
		return problemAnswer("417 Expectation Failed", Problem{Status: http.StatusExpectationFailed, Code: "expectation_failed", Title: "Expectation failed",
			Detail: "the only Expect this server meets is 100-continue; send the request without the Expect header"}), true
	}
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
	case 501:
		p = Problem{Status: status, Code: "unsupported_transfer_encoding", Title: "Transfer-Encoding not implemented",
			Detail: "the only Transfer-Encoding this server reads is chunked; send the body with a Content-Length or chunked"}
	case 505:
		p = Problem{Status: status, Code: "http_version_not_supported", Title: "HTTP version not supported",
			Detail: "this server speaks HTTP/1.0 and HTTP/1.1 (and HTTP/2 over TLS)"}
	default:
		return nil, false
	}
	return problemAnswer(string(line), p), true
}

// problemAnswer is a raw HTTP/1.1 answer of p with the status line line.
func problemAnswer(line string, p Problem) []byte {
	p.Type = problemTypePrefix + p.Code
	j, _ := marshalPlain(p) // strings and an int
	var out bytes.Buffer
	out.WriteString("HTTP/1.1 " + line + "\r\nContent-Type: application/problem+json\r\nContent-Length: " + strconv.Itoa(len(j)) + "\r\nConnection: close\r\n\r\n")
	out.Write(j)
	return out.Bytes()
}
