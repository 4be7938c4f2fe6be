package oauthtest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
)

// Chromium starts headless Debian Chromium with a CDP virtual
// authenticator (a platform passkey that always consents) and returns a
// context that drives it for up to timeout. Outside CI the test is skipped
// when Chromium is not installed; in CI (.ci/run installs it) that fails.
// extra adds to its flags (e.g. a host resolver rule for a test's public
// host name).
func Chromium(t *testing.T, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; .ci/run installs it")
		}
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-background-networking", true))
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first call starts the browser (and must not carry a timeout).
	err = chromedp.Do(ctx, chromedp.Navigate("about:blank"))
	if err == nil {
		_, err = chromedp.Call(ctx, webauthn.Enable, webauthn.EnableParams{})
	}
	if err == nil {
		_, err = chromedp.Call(ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Transport: webauthn.AuthenticatorTransportInternal,
			HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
		}})
	}
	if err != nil {
		t.Fatalf("start chromium with a virtual authenticator: %v", err)
	}
	if v, err := chromedp.Call(ctx, cdpbrowser.GetVersion, cdp.Empty{}); err == nil {
		t.Logf("browser: %s", v.Product)
	}
	tctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancelTimeout)
	return tctx
}
