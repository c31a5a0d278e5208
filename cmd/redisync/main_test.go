package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/redisync-go/redisync/internal/redistest"
)

func TestDemoEmbedded(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"demo", "-servers", "10", "-budget", "2000"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	if !strings.Contains(s, "with redisync.Mutex: paid 20.00 of 20.00 (exactly the budget)") {
		t.Fatalf("locked run wrong:\n%s", s)
	}
	if !strings.Contains(s, "without a lock:      paid") || !strings.Contains(s, "OVERSPENT") {
		t.Fatalf("the unlocked run did not overspend:\n%s", s)
	}
}

func TestDemoAndInspectOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"demo", "-redis", srv.Addr(), "-servers", "8", "-budget", "1000"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "exactly the budget") {
		t.Fatal(out.String())
	}
	rdb := srv.Client(t)
	rdb.HSet(context.Background(), "held", "3f2c8a6e-0000-4000-8000-000000000000:1", 2)
	rdb.Set(context.Background(), "str", "x", 0)
	out.Reset()
	if err := run(context.Background(), []string{"inspect", "-redis", srv.Addr(), "held", lockName, "str"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"held: lock (Mutex or FairMutex), held, no expiry\n",
		"  holder 3f2c8a6e-0000-4000-8000-000000000000:1  holds 2  (client 3f2c8a6e-0000-4000-8000-000000000000, owner 1)\n",
		lockName + ": free (no keys)\n", "str: a string, not a redisync primitive\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
}

func TestBadCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"nope"}, &out); err == nil {
		t.Fatal("want an error")
	}
	if err := run(context.Background(), nil, &out); err == nil {
		t.Fatal("want an error")
	}
	if err := run(context.Background(), []string{"demo", "-servers", "0"}, &out); err == nil {
		t.Fatal("want an error")
	}
	if err := run(context.Background(), []string{"inspect", "-redis", "127.0.0.1:1", ""}, &out); err == nil {
		t.Fatal("want an error for an empty name")
	}
}
