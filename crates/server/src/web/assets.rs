//! What every page is made of: the static files it loads ([`Asset`],
//! served under a name holding their hash), the Content-Security-Policy,
//! the form fields every page carries ([`Forms`]), the one-message page,
//! and [`render`].

use askama::Template;

/// The pages' Content-Security-Policy: everything from this server only,
/// no inline script or style (the style and script are [`CSS`] and
/// [`JS`]), no plugins, no framing, forms posting only here. An injected
/// `<script>` or `style=` would not run even if escaping failed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// A file the pages load, compiled into the binary and served under a
/// name that holds a hash of its content (`/static/web.HASH.css`): a
/// browser may keep it for a year, and a new build's pages name a new
/// file.
#[derive(Clone, Copy, Debug)]
pub struct Asset {
    /// The name's stem and extension, `web` and `css`.
    pub stem: &'static str,
    /// The extension.
    pub ext: &'static str,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The content.
    pub body: &'static str,
}

/// The pages' style.
pub const CSS: Asset = Asset {
    stem: "web",
    ext: "css",
    content_type: "text/css; charset=utf-8",
    body: include_str!("../../assets/web.css"),
};
/// The pages' script (highlighting a VM's threads, copy buttons).
pub const JS: Asset = Asset {
    stem: "web",
    ext: "js",
    content_type: "text/javascript; charset=utf-8",
    body: include_str!("../../assets/web.js"),
};

/// The host picture's style: the one the CLI's SVG carries inline.
pub const PICTURE_CSS: Asset =
    Asset { stem: "picture", ext: "css", content_type: "text/css; charset=utf-8", body: numaplace_emit::svg::STYLE };

/// FNV-1a, 64 bits: enough to tell two builds' files apart, computed at
/// compile time.
pub(crate) const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

impl Asset {
    /// The hash of its content, as the name and the `ETag` carry it.
    pub fn hash(&self) -> String {
        format!("{:016x}", fnv1a(self.body.as_bytes()))
    }

    /// Its file name, `web.HASH.css`.
    pub fn file(&self) -> String {
        format!("{}.{}.{}", self.stem, self.hash(), self.ext)
    }

    /// The address pages load it from.
    pub fn url(&self) -> String {
        format!("/static/{}", self.file())
    }
}

/// What every form of a page carries: the token field when the service
/// has one, and the session's CSRF token (`edge::session`).
#[derive(Clone, Debug)]
pub struct Forms {
    /// Whether the forms ask for the service's token.
    pub token_needed: bool,
    /// The session's CSRF token, the value of each form's `csrf` field.
    pub csrf: String,
}

/// The files every page loads ([`CSS`], [`PICTURE_CSS`], [`JS`]).
#[derive(Clone, Debug)]
pub struct Assets {
    /// The pages' style.
    pub css: String,
    /// The host picture's style.
    pub picture: String,
    /// The pages' script.
    pub js: String,
}

impl Default for Assets {
    fn default() -> Assets {
        Assets { css: CSS.url(), picture: PICTURE_CSS.url(), js: JS.url() }
    }
}

/// Renders a page's view-model; the templates are checked when the crate
/// is built, so only a writer's failure is left, answered as a 500.
pub(crate) fn render(page: &impl Template) -> String {
    page.render().unwrap_or_else(|e| {
        tracing::error!(code = "internal", "rendering a page: {e}");
        String::from("<!DOCTYPE html>\n<title>Error - numaplace</title><p>The page could not be rendered.</p>\n")
    })
}

/// A page that says one thing: an error, a refused form.
#[derive(Template)]
#[template(path = "message.html")]
pub struct MessagePage {
    /// The files the page loads.
    pub assets: Assets,
    /// Its title.
    pub title: String,
    /// Its heading, when any.
    pub heading: Option<String>,
    /// What it says.
    pub message: String,
}

impl MessagePage {
    pub(crate) fn new(title: &str, heading: Option<String>, message: impl Into<String>) -> MessagePage {
        MessagePage { assets: Assets::default(), title: title.into(), heading, message: message.into() }
    }
}
