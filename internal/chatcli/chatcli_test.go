package chatcli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/tokenizer/chat"
)

// TestKwargs: a value keeps what Python's json.loads keeps (1.0 a float, an object's
// order), a recorded set reads back the same, and a bad flag says what it wants.
func TestKwargs(t *testing.T) {
	var k Kwargs
	require.NoError(t, k.Set(`enable_thinking=false`))
	require.NoError(t, k.Set(`effort="high"`))
	require.NoError(t, k.Set(`budget=1.0`))
	require.NoError(t, k.Set(`opts={"z": 1, "a": [2]}`))
	assert.Equal(t, false, k["enable_thinking"])
	assert.Equal(t, "high", k["effort"])
	assert.Equal(t, json.Number("1.0"), k["budget"])
	assert.Equal(t, []string{"z", "a"}, k["opts"].(chat.Object).Keys)

	b, err := json.Marshal(k)
	require.NoError(t, err)
	var back Kwargs
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, k, back)

	tpl, err := chat.Parse("{{ budget }} {{ opts | tojson }}")
	require.NoError(t, err)
	r, err := tpl.Render(nil, chat.Options{Vars: back})
	require.NoError(t, err)
	assert.Equal(t, `1.0 {"z": 1, "a": [2]}`, r.Text)

	assert.ErrorContains(t, k.Set("enable_thinking"), `want KEY=JSON, got "enable_thinking"`)
	assert.ErrorContains(t, k.Set("effort=high"), `the value of effort is not JSON (a string needs quotes: effort='"..."')`)
	assert.ErrorContains(t, k.Set("x=1 2"), "not JSON")
}

func TestDate(t *testing.T) {
	d, err := Date("2024-07-01")
	require.NoError(t, err)
	assert.Equal(t, "2024-07-01 00:00", d.Format("2006-01-02 15:04"))
	_, err = Date("July 1")
	assert.EqualError(t, err, `want YYYY-MM-DD, got "July 1"`)
}

// TestDecodeMessages: after a byte order mark, invalid JSON is placed at FILE:LINE:COL
// and other errors name the file.
func TestDecodeMessages(t *testing.T) {
	msgs, _, err := DecodeMessages("c.json", []byte("\uFEFF"+`[{"role": "user", "content": "hi"}]`))
	require.NoError(t, err)
	assert.Equal(t, "hi", msgs[0]["content"])
	_, _, err = DecodeMessages("c.json", []byte("\uFEFF[\n  {\"role\": \"user\",,}]"))
	assert.ErrorContains(t, err, "c.json:2:19: not valid JSON: invalid character ','")
	_, _, err = DecodeMessages("c.json", []byte(`{"messages": []}`))
	assert.EqualError(t, err, `c.json: the conversation is empty ("messages": [])`)
}
