//! Live pages: server-sent events from the API, read in the browser (the
//! session cookie authenticates them). The browser reconnects by itself and
//! resends `Last-Event-ID`, so streams that number their events resume
//! without losing or repeating any. Nothing happens during server rendering.

use leptos::prelude::*;

/// What a page does with one server-sent event.
pub enum Next {
    Continue,
    /// The stream is over (a job ended): close it instead of reconnecting.
    Close,
}

/// Calls `handler(event, data)` for every event named in `events` from the
/// stream at `url`, while `url` gives a URL; the stream is closed when the
/// URL changes, when the handler says so, or when the component goes away.
/// `connected` is told when the connection opens (true) or drops (false).
pub fn follow(
    url: impl Fn() -> Option<String> + 'static,
    events: &'static [&'static str],
    handler: impl Fn(&str, String) -> Next + Clone + 'static,
    connected: impl Fn(bool) + Clone + 'static,
) {
    Effect::new(move |_| {
        let Some(url) = url() else { return };
        #[cfg(feature = "hydrate")]
        {
            if let Some(stream) = browser::open(&url, events, handler.clone(), connected.clone()) {
                let stream = send_wrapper::SendWrapper::new(stream);
                on_cleanup(move || stream.take().close());
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (url, events, handler.clone(), connected.clone());
    });
}

/// Calls `tick` every `ms` milliseconds in the browser while the component
/// lives, for a page that follows something no stream announces.
pub fn every(ms: i32, tick: impl Fn() + 'static) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let callback = wasm_bindgen::closure::Closure::<dyn Fn()>::new(tick);
        let Some(window) = web_sys::window() else { return };
        let Ok(handle) = window
            .set_interval_with_callback_and_timeout_and_arguments_0(callback.as_ref().unchecked_ref(), ms)
        else {
            return;
        };
        let kept = send_wrapper::SendWrapper::new(callback);
        on_cleanup(move || {
            if let Some(window) = web_sys::window() {
                window.clear_interval_with_handle(handle);
            }
            drop(kept.take());
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (ms, tick);
}

/// A tick that advances every `ms` milliseconds while `open` is true, for
/// a page that reads something again until it has ended (set `open` false
/// then). Returns (tick, open).
pub fn refreshing(ms: i32) -> (RwSignal<u64>, RwSignal<bool>) {
    let (tick, open) = (RwSignal::new(0u64), RwSignal::new(true));
    every(ms, move || {
        if open.get_untracked() {
            tick.update(|t| *t += 1);
        }
    });
    (tick, open)
}

#[cfg(feature = "hydrate")]
mod browser {
    use super::Next;
    use std::rc::Rc;
    use wasm_bindgen::JsCast;
    use wasm_bindgen::closure::Closure;
    use web_sys::{Event, EventSource, MessageEvent};

    /// An open stream and the callbacks it holds.
    pub struct Stream {
        source: EventSource,
        _callbacks: Vec<Closure<dyn Fn(Event)>>,
    }

    impl Stream {
        pub fn close(self) {
            self.source.close();
        }
    }

    pub fn open(
        url: &str,
        events: &[&'static str],
        handler: impl Fn(&str, String) -> Next + 'static,
        connected: impl Fn(bool) + Clone + 'static,
    ) -> Option<Stream> {
        let source = EventSource::new(url).ok()?;
        let handler = Rc::new(handler);
        let mut callbacks = Vec::new();
        for &name in events {
            let (handler, source_ref, connected) = (handler.clone(), source.clone(), connected.clone());
            let callback = Closure::<dyn Fn(Event)>::new(move |event: Event| {
                let Some(data) = event.dyn_ref::<MessageEvent>().and_then(|m| m.data().as_string()) else {
                    return;
                };
                if let Next::Close = handler(name, data) {
                    source_ref.close();
                    connected(false);
                }
            });
            source
                .add_event_listener_with_callback(name, callback.as_ref().unchecked_ref())
                .ok()?;
            callbacks.push(callback);
        }
        for (name, state) in [("open", true), ("error", false)] {
            let connected = connected.clone();
            let callback = Closure::<dyn Fn(Event)>::new(move |_| connected(state));
            source
                .add_event_listener_with_callback(name, callback.as_ref().unchecked_ref())
                .ok()?;
            callbacks.push(callback);
        }
        Some(Stream {
            source,
            _callbacks: callbacks,
        })
    }
}
