package faultproxy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseCommands(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [][]string
	}{
		{"", nil},
		{"PING\r\n", nil}, // inline commands: go-redis never writes them
		{"*1\r\n$4\r\nping\r\n", [][]string{{"ping"}}},
		{"*2\r\n$11\r\nunsubscribe\r\n$9\r\nsubscribe\r\n*2\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n",
			[][]string{{"unsubscribe", "subscribe"}, {"subscribe", "ch"}}},
		{"*2\r\n$0\r\n\r\n$4\r\na\r\nb\r\n", [][]string{{"", "a\r\nb"}}}, // binary-safe
		// Cut short: complete arguments only.
		{"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n$5\r\nbc", [][]string{{"subscribe", "a"}}},
		{"*1\r\n$4\r\npi", nil},
		{"*1\r\n$4\r\nping\r\n*2\r\n$3", [][]string{{"ping"}}},
		{"*x\r\n", nil},
		{"*1\r\n$-1\r\n", nil},
	} {
		require.Equal(t, tc.want, parseCommands([]byte(tc.in)), "%q", tc.in)
	}
}
