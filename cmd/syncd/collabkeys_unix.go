//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Keys given to syncd collaborate in its environment would stay readable
// in /proc/<pid>/environ for its whole run: os.Unsetenv changes the Go
// runtime's copy, not the block the kernel shows, which is the one the
// process was started with. So the process starts itself again (execve,
// same pid) with an environment without them, and hands them over
// through a pipe inherited across the exec, which it reads and closes
// first thing. Nothing else holds them then: not the environment, not
// the arguments, not an open descriptor.

// keysFDEnv names the descriptor of that pipe in the new image.
const keysFDEnv = "SYNC_COLLAB_KEYS_FD"

// reexecWithoutKeys starts the process again without secretEnv in its
// environment when any of them is there; it returns only when there is
// nothing to take out (nil) or the exec failed.
func reexecWithoutKeys() error {
	keys := map[string]string{}
	for _, k := range secretEnv {
		if v, ok := os.LookupEnv(k); ok {
			keys[k] = v
		}
	}
	if len(keys) == 0 {
		return nil
	}
	raw, _ := json.Marshal(keys)
	if len(raw) > maxKeysBytes {
		return fmt.Errorf("the keys in the environment are over %d bytes", maxKeysBytes)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	if _, err := w.Write(raw); err != nil {
		return err
	}
	_ = w.Close()
	// os.Pipe opens it close-on-exec: the new image must inherit it.
	fd := r.Fd()
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFD, 0); e != 0 {
		return e
	}
	env := make([]string, 0, len(os.Environ())+1)
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !isSecretEnv(name) && name != keysFDEnv {
			env = append(env, kv)
		}
	}
	env = append(env, keysFDEnv+"="+strconv.FormatUint(uint64(fd), 10))
	err = syscall.Exec(exe, os.Args, env)
	runtime.KeepAlive(r) // its finalizer would close fd before the exec
	return err
}

// handedKeys reads the keys reexecWithoutKeys handed over, if it did
// (nil otherwise), and closes their pipe.
func handedKeys() (map[string]string, error) {
	v, ok := os.LookupEnv(keysFDEnv)
	if !ok {
		return nil, nil
	}
	_ = os.Unsetenv(keysFDEnv)
	fd, err := strconv.ParseUint(v, 10, 31)
	if err != nil {
		return nil, fmt.Errorf("%s %q is not a descriptor", keysFDEnv, v)
	}
	f := os.NewFile(uintptr(fd), "keys")
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxKeysBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the keys handed over: %w", err)
	}
	keys := map[string]string{}
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("reading the keys handed over: %w", err)
	}
	return keys, nil
}
