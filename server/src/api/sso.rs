//! Optional single sign-on through an external OpenID Connect provider:
//! authorization code flow with PKCE, `state` and `nonce` kept in the
//! session, the ID token's signature (provider JWKS), issuer, audience,
//! expiry and nonce checked. Users are provisioned on first sign-in,
//! optionally only from allowed email domains.

use crate::api::sessions::{safe_next, start};
use crate::config::SsoConfig;
use crate::identity::users;
use crate::state::AppState;
use crate::store::ids::new_id;
use anyhow::{Context, bail};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation, decode, decode_header};
use oauth2::basic::{
    BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenIntrospectionResponse, BasicTokenType,
};
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet, EndpointSet,
    ExtraTokenFields, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, StandardRevocableToken,
    StandardTokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};
use tower_sessions::Session;

const SESSION_KEY: &str = "oidc_login";

/// What must survive the round trip through the provider.
#[derive(Serialize, Deserialize)]
struct Pending {
    state: String,
    nonce: String,
    verifier: String,
    next: String,
}

/// The provider's endpoints, from its discovery document.
#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    #[serde(default)]
    userinfo_endpoint: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
struct IdTokenField {
    id_token: String,
}
impl ExtraTokenFields for IdTokenField {}

type OidcClient = oauth2::Client<
    BasicErrorResponse,
    StandardTokenResponse<IdTokenField, BasicTokenType>,
    BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

fn http() -> anyhow::Result<reqwest::Client> {
    // No redirects: an OAuth endpoint that redirects is misconfigured or hostile.
    Ok(reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(15))
        .build()?)
}

async fn discover(config: &SsoConfig) -> anyhow::Result<Discovery> {
    let url = format!(
        "{}/.well-known/openid-configuration",
        config.issuer.trim_end_matches('/')
    );
    let discovery: Discovery = http()?
        .get(&url)
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?
        .error_for_status()?
        .json()
        .await
        .with_context(|| format!("{url} is not an OpenID Connect discovery document"))?;
    if discovery.issuer.trim_end_matches('/') != config.issuer.trim_end_matches('/') {
        bail!(
            "the provider says its issuer is {}, not {}",
            discovery.issuer,
            config.issuer
        );
    }
    Ok(discovery)
}

fn client(config: &SsoConfig, discovery: &Discovery, redirect: &str) -> anyhow::Result<OidcClient> {
    Ok(oauth2::Client::new(ClientId::new(config.client_id.clone()))
        .set_client_secret(ClientSecret::new(config.client_secret.clone()))
        .set_auth_uri(AuthUrl::new(discovery.authorization_endpoint.clone())?)
        .set_token_uri(TokenUrl::new(discovery.token_endpoint.clone())?)
        .set_redirect_uri(RedirectUrl::new(redirect.to_string())?))
}

fn callback_url(state: &AppState) -> String {
    format!("{}/auth/oidc/callback", state.config.public_url())
}

fn failed(next: &str) -> Response {
    let next: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
    Redirect::to(&format!("/login?error=sso&next={next}")).into_response()
}

#[derive(Deserialize)]
pub struct StartQuery {
    next: Option<String>,
}

/// `GET /auth/oidc/start?next=/path`: off to the provider.
pub async fn begin(
    State(state): State<AppState>,
    session: Session,
    Query(query): Query<StartQuery>,
) -> Response {
    let next = safe_next(query.next.as_deref());
    let Some(config) = state.config.sso.clone() else {
        return failed(&next);
    };
    match begin_inner(&state, &config, &session, next.clone()).await {
        Ok(url) => Redirect::to(&url).into_response(),
        Err(error) => {
            tracing::warn!(error = format!("{error:#}"), "SSO sign-in could not start");
            failed(&next)
        }
    }
}

async fn begin_inner(
    state: &AppState,
    config: &SsoConfig,
    session: &Session,
    next: String,
) -> anyhow::Result<String> {
    let discovery = discover(config).await?;
    let client = client(config, &discovery, &callback_url(state))?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let nonce = CsrfToken::new_random();
    let (url, csrf) = client
        .authorize_url(CsrfToken::new_random)
        .add_scope(Scope::new("openid".into()))
        .add_scope(Scope::new("email".into()))
        .add_scope(Scope::new("profile".into()))
        .add_extra_param("nonce", nonce.secret())
        .set_pkce_challenge(challenge)
        .url();
    let pending = Pending {
        state: csrf.secret().clone(),
        nonce: nonce.secret().clone(),
        verifier: verifier.secret().clone(),
        next,
    };
    session.insert(SESSION_KEY, pending).await?;
    Ok(url.to_string())
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    nonce: Option<String>,
    email: Option<String>,
    email_verified: Option<bool>,
    preferred_username: Option<String>,
}

/// `GET /auth/oidc/callback?code=…&state=…`: back from the provider.
pub async fn callback(
    State(state): State<AppState>,
    session: Session,
    Query(query): Query<CallbackQuery>,
) -> Response {
    let pending: Option<Pending> = session.remove(SESSION_KEY).await.ok().flatten();
    let Some(pending) = pending else {
        tracing::warn!("SSO callback without a sign-in in progress");
        return failed("/");
    };
    let Some(config) = state.config.sso.clone() else {
        return failed(&pending.next);
    };
    let next = pending.next.clone();
    match finish(&state, &config, &session, pending, query).await {
        Ok(user) => {
            tracing::info!(user, "signed in through SSO");
            Redirect::to(&next).into_response()
        }
        Err(error) => {
            tracing::warn!(error = format!("{error:#}"), "SSO sign-in refused");
            failed(&next)
        }
    }
}

async fn finish(
    state: &AppState,
    config: &SsoConfig,
    session: &Session,
    pending: Pending,
    query: CallbackQuery,
) -> anyhow::Result<String> {
    if let Some(error) = query.error {
        bail!("the provider answered {error}");
    }
    if query.state.as_deref() != Some(pending.state.as_str()) {
        bail!("the state does not match: not the sign-in this browser started");
    }
    let code = query.code.context("no authorization code")?;
    let discovery = discover(config).await?;
    let client = client(config, &discovery, &callback_url(state))?;
    let token = client
        .exchange_code(AuthorizationCode::new(code))
        .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier))
        .request_async(&http()?)
        .await
        .map_err(|e| anyhow::anyhow!("the code exchange failed: {e}"))?;
    let id_token = &token.extra_fields().id_token;
    let mut claims = verify(config, &discovery, id_token).await?;
    if claims.nonce.as_deref() != Some(pending.nonce.as_str()) {
        bail!("the ID token's nonce does not match this sign-in");
    }
    // Many providers put profile claims only in userinfo (OIDC Core §5.4).
    if claims.email.is_none()
        && let Some(endpoint) = &discovery.userinfo_endpoint
    {
        use oauth2::TokenResponse;
        let info: Claims = http()?
            .get(endpoint)
            .bearer_auth(token.access_token().secret())
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if info.sub != claims.sub {
            bail!(
                "userinfo is about {}, the ID token about {}",
                info.sub,
                claims.sub
            );
        }
        claims.email = info.email;
        claims.email_verified = info.email_verified;
        claims.preferred_username = claims.preferred_username.or(info.preferred_username);
    }
    let user_id = provision(state, config, &discovery.issuer, &claims).await?;
    start(session, &user_id).await?;
    Ok(claims.email.unwrap_or(claims.sub))
}

/// Checks the ID token's signature against the provider's keys, and its
/// issuer, audience and expiry.
async fn verify(config: &SsoConfig, discovery: &Discovery, id_token: &str) -> anyhow::Result<Claims> {
    let header = decode_header(id_token)?;
    let keys: JwkSet = http()?
        .get(&discovery.jwks_uri)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let jwk = match &header.kid {
        Some(kid) => keys
            .find(kid)
            .context("the ID token's key is not in the provider's key set")?,
        None => keys.keys.first().context("the provider publishes no keys")?,
    };
    let key = DecodingKey::from_jwk(jwk)?;
    let mut validation = Validation::new(header.alg);
    validation.set_issuer(&[&discovery.issuer]);
    validation.set_audience(&[&config.client_id]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    Ok(decode::<Claims>(id_token, &key, &validation)?.claims)
}

/// The user for these claims: found by issuer and subject, else created
/// (when the email domain is allowed).
async fn provision(
    state: &AppState,
    config: &SsoConfig,
    issuer: &str,
    claims: &Claims,
) -> anyhow::Result<String> {
    let subject = format!("{issuer}|{}", claims.sub);
    let existing = users::by_oidc_subject(&state.db, &subject).await?;
    if let Some((id, disabled)) = existing {
        if disabled.is_some() {
            bail!("the user is disabled");
        }
        return Ok(id);
    }
    if !config.allowed_domains.is_empty() {
        let email = claims
            .email
            .as_deref()
            .context("the provider gave no email address")?;
        if claims.email_verified != Some(true) {
            bail!("the email address {email} is not verified");
        }
        let domain = email.rsplit('@').next().unwrap_or_default().to_lowercase();
        if !config
            .allowed_domains
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(&domain))
        {
            bail!("{email} is not in an allowed domain");
        }
    }
    let base: String = claims
        .preferred_username
        .clone()
        .or_else(|| {
            claims
                .email
                .as_ref()
                .map(|e| e.split('@').next().unwrap_or_default().to_string())
        })
        .unwrap_or_else(|| claims.sub.clone())
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(56)
        .collect();
    let base = if base.is_empty() { "user".to_string() } else { base };
    let id = new_id("usr");
    for attempt in 0..100 {
        let name = if attempt == 0 {
            base.clone()
        } else {
            format!("{base}-{}", attempt + 1)
        };
        // The user and their membership, together or not at all.
        let created = users::create_from_sso(
            &state.db,
            &id,
            &name,
            claims.email.as_deref(),
            &subject,
            config.new_user_role,
        )
        .await?;
        if created {
            tracing::info!(name, role = ?config.new_user_role, "provisioned a user from SSO");
            return Ok(id);
        }
    }
    bail!("no free user name for {base}")
}
