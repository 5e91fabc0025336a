package chat_test

import (
	"fmt"
	"time"

	"github.com/gotrain/gotrain/tokenizer/chat"
)

// A ChatML template: the loss covers the assistant's reply and its <|im_end|>.
func Example() {
	t, err := chat.Parse(`{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content | trim }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}`)
	if err != nil {
		panic(err)
	}
	r, err := t.Render([]chat.Message{
		{"role": "user", "content": "What is 2+2?"},
		{"role": "assistant", "content": " 4 "},
	}, chat.Options{Now: time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", r.Text)
	for _, s := range r.Assistant {
		fmt.Printf("loss on %q\n", r.Text[s[0]:s[1]])
	}
	// Output:
	// "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
	// loss on "4<|im_end|>"
}
