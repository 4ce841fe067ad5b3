//go:build darwin && cgo

package menubar

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"runtime"

	"github.com/progrium/macdriver/cocoa"
	"github.com/progrium/macdriver/core"
	"github.com/progrium/macdriver/objc"
)

// AppKit must run on the process's main thread, where the main goroutine starts.
func init() { runtime.LockOSThread() }

// Run shows the status item and its menu and runs the AppKit loop on the
// main thread until the user quits. Menu callbacks run on the main thread:
// each hands its work to a goroutine, and every title change hops back to
// the main queue with core.Dispatch.
func Run(ctx context.Context, opts Options) error {
	c := NewController(opts)
	cocoa.TerminateAfterWindowsClose = false
	app := cocoa.NSApp_WithDidLaunch(func(_ objc.Object) {
		item := cocoa.NSStatusBar_System().StatusItemWithLength(cocoa.NSVariableStatusItemLength)
		item.Retain()
		item.Button().SetTitle("clef …")

		menu := cocoa.NSMenu_New()
		menu.SetAutoenablesItems(false)

		detail := cocoa.NSMenuItem_New()
		detail.SetTitle("Checking the daemon…")
		detail.SetEnabled(false)
		menu.AddItem(detail)
		menu.AddItem(cocoa.NSMenuItem_Separator())

		start := action("Start Daemon", "clefStart:", func() { report(c.Start()) })
		stop := action("Stop Daemon", "clefStop:", func() { report(c.Stop(ctx)) })
		menu.AddItem(start)
		menu.AddItem(stop)

		models := cocoa.NSMenu_New()
		models.SetAutoenablesItems(false)
		modelItems := map[string]cocoa.NSMenuItem{}
		for i, m := range c.Models() {
			m := m
			mi := action(filepath.Base(m), fmt.Sprintf("clefModel%d:", i), func() {
				report(c.SelectModel(ctx, m))
				core.Dispatch(func() {
					for p, it := range modelItems {
						it.SetState(onOff(p == m))
					}
				})
			})
			mi.SetToolTip(m)
			mi.SetState(onOff(m == c.Model()))
			modelItems[m] = mi
			models.AddItem(mi)
		}
		modelItem := cocoa.NSMenuItem_New()
		modelItem.SetTitle("Model")
		modelItem.SetSubmenu(models)
		menu.AddItem(modelItem)

		menu.AddItem(action("Open Logs", "clefLogs:", func() { report(c.OpenLogs()) }))
		var login cocoa.NSMenuItem
		login = action("Launch at Login", "clefLogin:", func() {
			on := !c.LaunchAtLogin()
			report(c.SetLaunchAtLogin(on))
			now := c.LaunchAtLogin()
			core.Dispatch(func() { login.SetState(onOff(now)) })
		})
		login.SetState(onOff(c.LaunchAtLogin()))
		menu.AddItem(login)
		menu.AddItem(cocoa.NSMenuItem_Separator())
		menu.AddItem(cocoa.NSMenuItem_Init("Quit clef menu", objc.Sel("terminate:"), "q"))
		item.SetMenu(menu)

		go c.watch(ctx, func(s Summary) {
			core.Dispatch(func() {
				item.Button().SetTitle(s.Title)
				item.Button().SetToolTip(s.Detail)
				detail.SetTitle(s.Detail)
				start.SetEnabled(!s.Running)
				stop.SetEnabled(s.Running)
			})
		})
	})
	app.SetActivationPolicy(cocoa.NSApplicationActivationPolicyAccessory)
	go func() { // SIGINT/SIGTERM end the app like Quit does
		<-ctx.Done()
		core.Dispatch(func() { app.Terminate() })
	}()
	app.Run()
	return nil
}

// action makes a menu item whose selector runs fn on a new goroutine, off
// the main thread.
func action(title, selector string, fn func()) cocoa.NSMenuItem {
	mi := cocoa.NSMenuItem_New()
	mi.SetTitle(title)
	mi.SetAction(objc.Sel(selector))
	cocoa.DefaultDelegateClass.AddMethod(selector, func(_ objc.Object) { go fn() })
	return mi
}

func onOff(b bool) int {
	if b {
		return 1 // NSControlStateValueOn
	}
	return 0
}

func report(err error) {
	if err != nil {
		log.Printf("clef menubar: %v", err)
	}
}
