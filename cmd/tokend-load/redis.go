package main

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// redisDBSize returns the number of keys in the database a redis:// URL
// names. It tells whether tokend wrote to its cache.
func redisDBSize(rawURL string) (int64, error) {
	line, err := redisDo(rawURL, "DBSIZE")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimPrefix(line, ":"), 10, 64)
}

// redisFlushDB empties the database a redis:// URL names.
func redisFlushDB(rawURL string) error {
	_, err := redisDo(rawURL, "FLUSHDB")
	return err
}

// redisDo runs one command on the database a redis:// URL names and returns
// the first line of the reply, speaking just enough RESP for AUTH, SELECT,
// DBSIZE and FLUSHDB (replies of one line).
func redisDo(rawURL string, args ...string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return "", fmt.Errorf("not a redis:// URL")
	}
	if u.Scheme == "rediss" {
		return "", fmt.Errorf("rediss:// is not supported here")
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "6379")
	}
	conn, err := net.DialTimeout("tcp", host, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	rd := bufio.NewReader(conn)
	cmd := func(args ...string) (string, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			return "", err
		}
		line, err := rd.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "-") {
			return "", fmt.Errorf("redis: %s", line[1:])
		}
		return line, nil
	}
	if pw, ok := u.User.Password(); ok {
		auth := []string{"AUTH", pw}
		if name := u.User.Username(); name != "" {
			auth = []string{"AUTH", name, pw}
		}
		if _, err := cmd(auth...); err != nil {
			return "", err
		}
	}
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		if _, err := cmd("SELECT", db); err != nil {
			return "", err
		}
	}
	return cmd(args...)
}
