package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/loom/collab"
)

// syncd collaborate: a loom collaborator that runs itself (substrate/loom/
// collab), in its own process against the server's database. The domain
// is collab.Run; this is flags, the key's file, logging and signals.

// collabConfig is the collaborator's configuration: every field has a
// flag and an environment variable (the flag wins), except the chat key,
// which is read from a file or the environment, never a flag (a flag shows
// in the process list).
type collabConfig struct {
	db   config // DatabaseURL, DataDir, DBMaxConns
	loom loom.Options
	run  collab.Config
	json bool
}

func parseCollabConfig(args []string) (*collabConfig, error) {
	c := &collabConfig{}
	fs := flag.NewFlagSet("syncd collaborate", flag.ContinueOnError)
	env := func(name, def string) string {
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		return def
	}
	fs.StringVar(&c.run.Room, "room", env("SYNC_COLLAB_ROOM", ""), "room the collaborator works in (SYNC_COLLAB_ROOM)")
	fs.StringVar(&c.run.Agent, "agent", env("SYNC_COLLAB_AGENT", ""), "agent it embodies, created by the room's owner (SYNC_COLLAB_AGENT)")
	tree := fs.String("tree", env("SYNC_COLLAB_TREE", "0"), "tree it follows; 0: where the agent is, else tree 1 (SYNC_COLLAB_TREE)")
	fs.StringVar(&c.run.Branch, "branch", env("SYNC_COLLAB_BRANCH", ""), "branch it follows, e.g. 1 or 8.2; empty: the agent's (SYNC_COLLAB_BRANCH)")
	fs.StringVar(&c.run.ChatURL, "chat-url", env("SYNC_COLLAB_CHAT_URL", ""), "OpenAI-compatible chat endpoint: …/v1/chat/completions or a base URL (SYNC_COLLAB_CHAT_URL)")
	fs.StringVar(&c.run.ChatModel, "chat-model", env("SYNC_COLLAB_CHAT_MODEL", ""), "model name sent to the chat endpoint (SYNC_COLLAB_CHAT_MODEL)")
	keyFile := fs.String("chat-key-file", env("SYNC_COLLAB_CHAT_KEY_FILE", ""), "file holding the chat endpoint's API key, - for standard input (SYNC_COLLAB_CHAT_KEY_FILE; or the key itself in SYNC_COLLAB_CHAT_KEY)")
	systemFile := fs.String("system-file", env("SYNC_COLLAB_SYSTEM_FILE", ""), "file holding the base system prompt; the loom-aware addendum follows it (SYNC_COLLAB_SYSTEM_FILE)")
	maxCalls := fs.String("max-calls", env("SYNC_COLLAB_MAX_CALLS", "50"), "budget: chat calls (SYNC_COLLAB_MAX_CALLS)")
	maxTokens := fs.String("max-tokens", env("SYNC_COLLAB_MAX_TOKENS", "200000"), "budget: prompt + completion tokens (SYNC_COLLAB_MAX_TOKENS)")
	maxGens := fs.String("max-generations", env("SYNC_COLLAB_MAX_GENERATIONS", "40"), "budget: continuations the base model writes for its → continue (SYNC_COLLAB_MAX_GENERATIONS)")
	modelTurns := fs.String("model-turns", env("SYNC_COLLAB_MODEL_TURNS", "3"), "turns in a row it answers nodes only models wrote before it waits for a person's (SYNC_COLLAB_MODEL_TURNS)")
	lease := fs.String("lease", env("SYNC_COLLAB_LEASE", "90s"), "how long its record shows it alive without news; renewed every third (SYNC_COLLAB_LEASE)")
	maxTime := fs.String("max-time", env("SYNC_COLLAB_MAX_TIME", "30m"), "budget: wall time (SYNC_COLLAB_MAX_TIME)")
	replyTokens := fs.String("reply-tokens", env("SYNC_COLLAB_REPLY_TOKENS", "1024"), "max_tokens of each call (SYNC_COLLAB_REPLY_TOKENS)")
	contextTokens := fs.String("context-tokens", env("SYNC_COLLAB_CONTEXT_TOKENS", "6000"), "tokens of conversation (branch text and earlier words) before older parts are summarised or left out (SYNC_COLLAB_CONTEXT_TOKENS)")
	turnCalls := fs.String("turn-calls", env("SYNC_COLLAB_TURN_CALLS", "8"), "calls one turn may take before the branch is yielded (SYNC_COLLAB_TURN_CALLS)")
	fs.StringVar(&c.db.DatabaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL URL of the server's database (DATABASE_URL); empty shares the embedded cluster of -data-dir")
	fs.StringVar(&c.db.DataDir, "data-dir", env("SYNC_DATA_DIR", defaultDataDir()), "the server's data directory, when it runs the embedded cluster (SYNC_DATA_DIR)")
	fs.StringVar(&c.loom.GeneratorURL, "loom-generator-url", env("SYNC_LOOM_GENERATOR_URL", ""), "the base model → continue calls, as the server's (SYNC_LOOM_GENERATOR_URL)")
	fs.StringVar(&c.loom.GeneratorModel, "loom-generator-model", env("SYNC_LOOM_GENERATOR_MODEL", "base"), "model name sent to the loom generator (SYNC_LOOM_GENERATOR_MODEL)")
	logFormat := fs.String("log-format", env("SYNC_LOG_FORMAT", "text"), "log format, text or json (SYNC_LOG_FORMAT)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only; see syncd collaborate -h)", fs.Arg(0))
	}
	c.db.DBMaxConns = 4
	c.json = *logFormat == "json"
	if err := c.parseNumbers(numberFlags{tree: *tree, maxCalls: *maxCalls, maxTokens: *maxTokens, maxGens: *maxGens, modelTurns: *modelTurns,
		lease: *lease, maxTime: *maxTime, replyTokens: *replyTokens, contextTokens: *contextTokens, turnCalls: *turnCalls}); err != nil {
		return nil, err
	}
	if err := c.checkMissing(); err != nil {
		return nil, err
	}
	if err := c.readFiles(*keyFile, *systemFile); err != nil {
		return nil, err
	}
	// The keys are read once and leave the Go environment: a process
	// this one starts (the embedded cluster, with -data-dir) would
	// inherit them. The process's own /proc environ is the kernel's copy,
	// which Unsetenv does not change: collaborateMain started the process
	// again without them before this (collabkeys_unix.go).
	for _, k := range secretEnv {
		_ = os.Unsetenv(k)
	}
	return c, nil
}

// numberFlags are the numeric and duration flags as given.
type numberFlags struct {
	tree, maxCalls, maxTokens, maxGens, modelTurns, lease, maxTime, replyTokens, contextTokens, turnCalls string
}

// parseNumbers parses the tree, the budgets and the durations into c.run.
func (c *collabConfig) parseNumbers(f numberFlags) error {
	var err error
	if c.run.Tree, err = strconv.ParseInt(f.tree, 10, 64); err != nil || c.run.Tree < 0 {
		return fmt.Errorf("tree %q is not a tree number", f.tree)
	}
	var n int64
	if n, err = positiveNumber("max calls", f.maxCalls); err != nil {
		return err
	}
	c.run.MaxCalls = int(n)
	if c.run.MaxTokens, err = positiveNumber("max tokens", f.maxTokens); err != nil {
		return err
	}
	if c.run.Lease, err = time.ParseDuration(f.lease); err != nil || c.run.Lease < 300*time.Millisecond {
		return fmt.Errorf("lease %q is not a duration of at least 300ms, such as 90s", f.lease)
	}
	if c.run.MaxTime, err = time.ParseDuration(f.maxTime); err != nil || c.run.MaxTime <= 0 {
		return fmt.Errorf("max time %q is not a positive duration such as 30m", f.maxTime)
	}
	for _, x := range []struct {
		name, v string
		dst     *int
	}{{"reply tokens", f.replyTokens, &c.run.ReplyTokens}, {"context tokens", f.contextTokens, &c.run.ContextTokens}, {"turn calls", f.turnCalls, &c.run.TurnCalls},
		{"max generations", f.maxGens, &c.run.MaxGenerations}, {"model turns", f.modelTurns, &c.run.ModelTurns}} {
		if n, err = positiveNumber(x.name, x.v); err != nil {
			return err
		}
		*x.dst = int(n)
	}
	return nil
}

// positiveNumber parses v as a positive whole number; name says which in the
// error.
func positiveNumber(name, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s %q is not a positive whole number", name, v)
	}
	return n, nil
}

// checkMissing refuses a configuration without room, agent or chat
// endpoint, naming every flag missing.
func (c *collabConfig) checkMissing() error {
	var missing []string
	for _, m := range []struct{ flag, v string }{{"-room", c.run.Room}, {"-agent", c.run.Agent}, {"-chat-url", c.run.ChatURL}, {"-chat-model", c.run.ChatModel}} {
		if m.v == "" {
			missing = append(missing, m.flag)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (see syncd collaborate -h)", strings.Join(missing, ", "))
	}
	return nil
}

// readFiles reads the keys (the environment's, or those handed across the
// re-exec, then keyFile's) and the system prompt of systemFile.
func (c *collabConfig) readFiles(keyFile, systemFile string) error {
	c.run.ChatKey, c.loom.GeneratorKey = os.Getenv("SYNC_COLLAB_CHAT_KEY"), os.Getenv("SYNC_LOOM_GENERATOR_KEY")
	if handed, err := handedKeys(); err != nil {
		return err
	} else if handed != nil {
		c.run.ChatKey, c.loom.GeneratorKey = handed["SYNC_COLLAB_CHAT_KEY"], handed["SYNC_LOOM_GENERATOR_KEY"]
	}
	if keyFile != "" {
		var raw []byte
		var err error
		if keyFile == "-" { // standard input: a pipe from a secret store
			raw, err = io.ReadAll(io.LimitReader(os.Stdin, maxKeysBytes))
		} else {
			raw, err = os.ReadFile(keyFile)
		}
		if err != nil {
			return fmt.Errorf("chat key file: %w", err)
		}
		c.run.ChatKey = strings.TrimSpace(string(raw))
		if c.run.ChatKey == "" {
			return fmt.Errorf("chat key file %s is empty", keyFile)
		}
	}
	if systemFile != "" {
		raw, err := os.ReadFile(systemFile)
		if err != nil {
			return fmt.Errorf("system prompt file: %w", err)
		}
		c.run.System = strings.TrimSpace(string(raw))
	}
	return nil
}

// maxKeysBytes bounds the keys read from standard input or handed over
// across the re-exec (collabkeys_unix.go: the pipe is written in full
// before the exec, so they must fit in its buffer, 64 KiB on Linux).
const maxKeysBytes = 16 << 10

// secretEnv are the keys syncd collaborate may be given in its
// environment.
var secretEnv = []string{"SYNC_COLLAB_CHAT_KEY", "SYNC_LOOM_GENERATOR_KEY"}

func isSecretEnv(name string) bool {
	for _, k := range secretEnv {
		if name == k {
			return true
		}
	}
	return false
}

// collaborateMain runs syncd collaborate until it stops; its exit code.
func collaborateMain(args []string) int {
	if err := reexecWithoutKeys(); err != nil {
		fmt.Fprintln(os.Stderr, "syncd collaborate: cannot take the keys out of the environment:", err, "(give the chat key with -chat-key-file instead)")
		return 2
	}
	cc, err := parseCollabConfig(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "syncd collaborate:", err)
		return 2
	}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if cc.json {
		h = slog.NewJSONHandler(os.Stderr, nil)
	}
	slog.SetDefault(slog.New(h))
	ctx, stop := signalContext()
	defer stop()
	if err := collaborate(ctx, cc); err != nil {
		slog.Error("syncd collaborate stopped", "err", err)
		return 1
	}
	return 0
}

// collaborate opens the server's database and runs the collaborator on it.
func collaborate(ctx context.Context, cc *collabConfig) error {
	db, closeDB, explain, err := openDatabase(ctx, &cc.db, true)
	if err != nil {
		return err
	}
	defer closeDB()
	return explain(collaborateOn(ctx, db, cc))
}

func collaborateOn(ctx context.Context, db *store.DB, cc *collabConfig) error {
	if _, err := db.Migrate(ctx); err != nil {
		return err
	}
	svc := substrate.New(db, substrate.Options{Features: features()})
	defer svc.Close()
	loom.Attach(svc, cc.loom)
	rec, err := collab.Run(ctx, svc, cc.run)
	if err != nil {
		return err
	}
	slog.Info("collaborator done", "room", cc.run.Room, "agent", cc.run.Agent, "reason", rec.Reason, "calls", rec.Calls,
		"prompt_tokens", rec.PromptTokens, "completion_tokens", rec.CompletionTokens)
	return nil
}
