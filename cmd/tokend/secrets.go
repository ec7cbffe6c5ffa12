package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// secretVars are the variables that may hold a secret: the server keys, and
// the URLs, which may carry a password. Each may instead be read from a file:
// NAME_FILE names it, or systemd's credentials directory holds one called
// NAME ($CREDENTIALS_DIRECTORY/NAME, from LoadCredential=NAME:/path).
var secretVars = []string{
	"TOKEND_SECRET_KEY",
	"TOKEND_PREVIOUS_SECRET_KEYS",
	"TOKEND_DATABASE_URL",
	"TOKEND_DATABASE_SESSION_URL",
	"TOKEND_REDIS_URL",
}

// maxSecretFile bounds what is read of a secret's file: a key or a URL, not
// whatever a wrong path points at.
const maxSecretFile = 64 << 10

// secretsFromFiles returns getenv with each of secretVars that is not set
// read from its file: NAME_FILE's, else $CREDENTIALS_DIRECTORY/NAME if that
// exists. A trailing line break is dropped. It refuses a variable set both
// ways, and a file it cannot read, that is empty, or too large, naming the
// variable and the path.
func secretsFromFiles(getenv func(string) string) (func(string) string, error) {
	read := map[string]string{}
	creds := getenv("CREDENTIALS_DIRECTORY")
	for _, name := range secretVars {
		path, from := getenv(name+"_FILE"), name+"_FILE"
		switch {
		case path != "" && getenv(name) != "":
			return nil, fmt.Errorf("%s and %s are both set: keep one", name, from)
		case path == "" && getenv(name) == "" && creds != "":
			if _, err := os.Stat(filepath.Join(creds, name)); err == nil {
				path, from = filepath.Join(creds, name), "systemd credential "+name
			}
		}
		if path == "" {
			continue
		}
		v, err := readSecret(path)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", name, from, err)
		}
		read[name] = v
	}
	if len(read) == 0 {
		return getenv, nil
	}
	return func(k string) string {
		if v, ok := read[k]; ok {
			return v
		}
		return getenv(k)
	}, nil
}

func readSecret(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("read %s: %w", path, err)
	case len(b) > maxSecretFile:
		return "", fmt.Errorf("%s is over %d KiB: not a key or a URL", path, maxSecretFile>>10)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}
