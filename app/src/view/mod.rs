//! Pieces shared by pages: formatting, ANSI text, the log viewer, tables,
//! live updates, links that keep the view in the URL, `loaded` and
//! `ShowLoaded`.

pub mod actions;
pub mod ansi;
pub mod chart;
pub mod format;
pub mod live;
pub mod logs;
pub mod query;
pub mod sweep_charts;
pub mod tables;

use leptos::children::{TypedChildrenFn, ViewFn};
use leptos::prelude::*;

/// The message of a server function error, without the framework's prefix.
pub fn error_text(error: &ServerFnError) -> String {
    match error {
        ServerFnError::ServerError(message) => message.clone(),
        other => other.to_string(),
    }
}

/// `render(value)` once `resource` has loaded; its error in place if it failed.
pub fn loaded<T, V>(
    resource: Resource<Result<T, ServerFnError>>,
    render: impl Fn(T) -> V + Clone + Send + Sync + 'static,
) -> impl IntoView
where
    T: Clone + Send + Sync + 'static,
    V: IntoView + 'static,
{
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let render = render.clone();
                resource.get().map(move |result| match result {
                    Ok(value) => render(value).into_any(),
                    Err(error) => view! { <p class="error" role="alert">{error_text(&error)}</p> }.into_any(),
                })
            }}
        </Transition>
    }
}

/// `<Show>` for a condition that reads resources, such as the viewer's role
/// deciding which controls a `<Transition>` holds.
///
/// `Show` keeps its condition in a memo. On the server, resources resolve on
/// other threads, and reactive_graph 0.2 marks a memo clean when it finishes
/// computing: a resource that resolved meanwhile loses its "dirty" mark, and
/// the memo keeps the answer it computed while the resource was loading. The
/// run page was then sent without its editors' button, the browser expected
/// it while hydrating, and the page was left without handlers. So on the
/// server the condition is asked when the HTML is written. The browser runs
/// on one thread and keeps the memo, so the children are built again only
/// when the answer changes (an open form survives a reloaded resource). The
/// markup is the same either way.
#[component(transparent)]
pub fn ShowLoaded<W, C>(
    children: TypedChildrenFn<C>,
    when: W,
    #[prop(optional, into)] fallback: ViewFn,
) -> impl IntoView
where
    W: Fn() -> bool + Send + Sync + 'static,
    C: IntoView + 'static,
{
    #[cfg(not(feature = "ssr"))]
    let when = {
        let memo = ArcMemo::new(move |_| when());
        move || memo.get()
    };
    let children = children.into_inner();
    move || {
        if when() {
            leptos::either::Either::Left(children())
        } else {
            leptos::either::Either::Right(fallback.run())
        }
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use leptos::tachys::view::RenderHtml;

    /// A condition whose data arrives while it is being computed, as a
    /// resource resolving on another thread does: it reads "not loaded",
    /// and the data is loaded before it returns.
    fn raced_condition() -> impl Fn() -> bool + Send + Sync + Clone + 'static {
        let loaded = RwSignal::new(false);
        move || {
            let answer = loaded.get();
            if !answer {
                loaded.set(true);
            }
            answer
        }
    }

    /// The server walks a `<Transition>`'s children once while resources
    /// load (`dry_resolve`), then writes them.
    fn rendered_on_the_server(view: impl RenderHtml) -> String {
        let mut view = view;
        view.dry_resolve();
        view.to_html()
    }

    #[test]
    fn a_condition_whose_data_arrives_while_it_is_computed_is_rendered_as_it_ends() {
        Owner::new().with(|| {
            let when = raced_condition();
            let html =
                rendered_on_the_server(view! { <ShowLoaded when=when><button>"Edit"</button></ShowLoaded> });
            assert!(html.contains("<button>Edit</button>"), "{html}");

            // `Show` keeps the answer of the computation the data overtook.
            // Should this start failing, reactive_graph no longer loses the
            // mark, and `ShowLoaded` can become `Show` again.
            let when = raced_condition();
            let html = rendered_on_the_server(view! { <Show when=when><button>"Edit"</button></Show> });
            assert!(!html.contains("<button>Edit</button>"), "{html}");
        });
    }
}
