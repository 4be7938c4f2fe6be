package collab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Message is one chat message (OpenAI-compatible).
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// maxAnswerBytes bounds what is read of a chat endpoint's answer: a larger
// one is refused whole, never buffered.
const maxAnswerBytes = 1 << 20

// errTooLarge is an answer over maxAnswerBytes.
var errTooLarge = errors.New("the chat endpoint's answer is over 1 MiB; refused, nothing in it ran")

// noRedirects is client without following redirects: Go's client keeps
// the Authorization header on a redirect to another port or scheme of the
// same host, so the key would reach a server it was not configured for.
func noRedirects(client *http.Client) *http.Client {
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// chatURL is the endpoint to POST to: a URL ending in /chat/completions as
// given; a base URL (https://host, https://host/v1) gets the path added.
func chatURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("the chat URL %q is not an http(s) URL", redactURL(raw))
	}
	if u.User != nil {
		return "", fmt.Errorf("the chat URL must not carry credentials: give the key with -chat-key-file or SYNC_COLLAB_CHAT_KEY")
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
	case strings.HasSuffix(p, "/v1"):
		u.Path = p + "/chat/completions"
	default:
		u.Path = p + "/v1/chat/completions"
	}
	return u.String(), nil
}

// redactURL is raw without query and user info, for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

type chatAnswer struct {
	Text             string
	PromptTokens     int64
	CompletionTokens int64
}

// chat makes one call. Its errors never carry the key (it is only ever a
// header) nor the endpoint's body.
func (c *collaborator) chat(ctx context.Context, msgs []Message) (*chatAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"model": c.cfg.ChatModel, "messages": msgs, "max_tokens": c.replyTokens})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.cfg.ChatKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.ChatKey)
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("the chat endpoint did not answer: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
		if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode/100 == 3 {
			return nil, fmt.Errorf("the chat endpoint answered %s, a redirect to %s: not followed (the key goes to the configured URL only); give that URL as the chat URL", resp.Status, redactURL(loc))
		}
		return nil, fmt.Errorf("the chat endpoint answered %s", resp.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the chat endpoint's answer: %v", err)
	}
	if len(raw) > maxAnswerBytes {
		return nil, errTooLarge
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) == 0 {
		return nil, fmt.Errorf("the chat endpoint's answer has no choices[0].message.content (is %s a /v1/chat/completions endpoint?)", redactURL(c.url))
	}
	return &chatAnswer{Text: out.Choices[0].Message.Content, PromptTokens: max(0, out.Usage.PromptTokens),
		CompletionTokens: max(0, out.Usage.CompletionTokens)}, nil
}
