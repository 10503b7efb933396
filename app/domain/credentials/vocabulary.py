"""The words that name a credential, and the words that say a sentence is only about one.

Two kinds of credential word, because they differ in how often they mean something else:

* ``PASSWORD_WORDS`` name nothing but a password (in many languages): after ``password:``,
  ``das Passwort ist``, ``the router password is``, any value that is not a placeholder or a
  word of ordinary prose is taken for the password itself.
* ``SECRET_WORDS`` (secret, token, key, cookie, session; ``pass``, ``pin``, ``parole``) have
  everyday senses (``the secret is persistence``, ``token budget``): a value after them
  counts when it looks like a credential (digits, symbols or mixed case), or when it is
  assigned like configuration (``API_KEY=tulip``).

Every word is written as it reads; ``normalise.keyword`` folds it as the scanned text is
folded.
"""

from __future__ import annotations

import re
from typing import Final

PASSWORD_WORDS: Final = (
    # English
    "password", "passwd", "passphrase", "pass phrase", "passcode", "pass code", "pwd", "pw",
    "passwort", "passwortes", "kennwort",  # German
    "mot de passe", "mdp",  # French
    "contraseña", "contrasena", "contrasenya",  # Spanish, Catalan
    "senha", "palavra-passe",  # Portuguese
    "wachtwoord",  # Dutch
    "hasło", "haslo", "hasła",  # Polish
    "heslo", "hesla",  # Czech, Slovak
    "jelszó", "jelszo",  # Hungarian
    "parolă",  # Romanian
    "şifre", "şifresi", "sifre",  # Turkish
    "lösenord", "lösenordet", "losenord", "passord", "passordet", "adgangskode", "adgangskoden",  # Nordic
    "salasana", "salasanan", "salasõna", "lykilorð",
    "lozinka", "лозинка", "парола",  # Serbo-Croatian, Bulgarian
    "пароль", "пароля",  # Russian, Ukrainian
    "slaptažodis", "parool",  # Lithuanian, Estonian
    "κωδικός", "συνθηματικό",  # Greek
    "סיסמה", "סיסמא",  # Hebrew
    "كلمة المرور", "كلمة السر",  # Arabic
    "رمز عبور", "گذرواژه",  # Persian
    "पासवर्ड",  # Hindi
    "รหัสผ่าน",  # Thai
    "mật khẩu", "mat khau",  # Vietnamese
    "kata sandi", "kata laluan",  # Indonesian, Malay
    "密码", "密碼", "口令",  # Chinese
    "パスワード", "暗証番号",  # Japanese
    "비밀번호", "패스워드", "암호",  # Korean
    "psw", "pswd", "pword", "wpa key", "wpa2 key", "wpa passphrase", "wifi key", "wi-fi key", "wlan key",
    "network key", "wep key", "pre-shared key",  # abbreviations, networks
)  # fmt: skip

# Account names that, before ``/`` and a password-like word, make a login pair
# (``use admin/hunter2``) without a login word in front.
ACCOUNT_NAMES: Final = frozenset(
    "admin administrator root sa postgres pi ubuntu ec2-user guest operator oracle sysadmin superuser "
    "webadmin ftp ftpuser support manager user test demo dev deploy jenkins git mysql elastic kibana "
    "grafana rabbitmq minioadmin admin1".split()
)
# Passwords that ship as defaults: a login pair with one of these is a credential whatever it
# reads like (``root/toor``, ``admin/admin``, ``pi/raspberry``).
DEFAULT_PASSWORDS: Final = frozenset(
    "toor admin changeme letmein raspberry ubnt alpine calvin guest default 1234 12345 123456 12345678 "
    "0000 qwerty secret minioadmin elastic public private".split()
)

SECRET_WORDS: Final = (
    "secret", "client secret", "secret key", "private key", "api key", "apikey", "access key",
    "token", "access token", "auth token", "refresh token", "session token", "bearer",
    "credential", "credentials", "creds", "cookie", "session id", "session key", "sessionid",
    "pass", "pin", "pin code", "parole", "parola", "clave", "chave",
    "geheimnis", "schlüssel", "api-schlüssel", "clé api", "cle api", "clave api", "chave api",
    "токен", "ключ api", "api ключ", "секрет",
    "密钥", "秘钥", "令牌", "トークン", "シークレット", "apiキー", "토큰", "api 키",
)  # fmt: skip

# Single words of a memory key that name a credential (``db_password``, ``githubToken``,
# ``Passwort``); compared after folding and lower-casing the key's words.
CREDENTIAL_KEY_WORDS: Final = frozenset(
    {
        "password", "passwd", "passphrase", "passcode", "pwd", "pw", "secret", "token", "apikey",
        "cookie", "credential", "credentials", "creds", "privatekey", "accesskey", "secretkey",
        "clientsecret", "sessionid", "sessionkey", "sessiontoken", "bearer", "pin", "pass",
        "passwort", "kennwort", "motdepasse", "mdp", "contraseña", "contrasena", "senha",
        "wachtwoord", "hasło", "haslo", "heslo", "jelszó", "parolă", "şifre", "lösenord",
        "passord", "adgangskode", "salasana", "lozinka", "пароль", "парола", "密码", "密碼",
        "パスワード", "暗証番号", "비밀번호", "패스워드", "токен",
    }
)  # fmt: skip
# Adjacent key words that together name one: ``api_key``, ``session-id``, ``mot de passe``.
CREDENTIAL_KEY_PAIRS: Final = frozenset(
    {
        ("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key"),
        ("client", "secret"), ("session", "id"), ("session", "key"), ("auth", "token"),
        ("access", "token"), ("refresh", "token"), ("pass", "phrase"), ("de", "passe"),
        ("recovery", "code"), ("recovery", "codes"), ("backup", "codes"), ("seed", "phrase"),
        ("mnemonic", "phrase"), ("totp", "secret"), ("otp", "secret"), ("mfa", "secret"),
    }
)  # fmt: skip
# Words a credential-naming key may end with and still name the credential
# (``db_password_prod``, ``token2``); any other last word names something about it
# (``password_policy``, ``token_budget``, ``api_key_owner``).
KEY_QUALIFIERS: Final = frozenset(
    "prod production staging stage dev develop test testing live sandbox old new current "
    "previous backup primary secondary main root admin default value plain raw b64 base64 "
    "enc encrypted hash hashed env v1 v2 v3".split()
)

# Words that hold sentences together: a value among them is prose (``stored in the vault``,
# ``ask the platform team``), never a passphrase. In the languages of ``PASSWORD_WORDS``'
# sentences as well (``le mot de passe est stocké dans le coffre``).
GLUE_WORDS: Final = frozenset(
    """
    a an the this that these those it its their our your my his her them they we you he she
    in on at not no never now per from for to by with via of into onto as than then and or
    is are was were be been being will would should must can could may might has have had
    does do did here there still also only just always usually every each all any some none
    please see ask
    der die das den dem des ein eine ist wird im in nicht und oder bei
    le la les un une des est dans pas et ou au aux du
    el los las es en y o del se
    o os as um uma é em não e do da no na
    het een en niet wordt bij
    в на не и или хранится
    """.split()
)
# Further words of prose about a credential after a keyword (``the token is expired``,
# ``password: stored in Vault``); a passphrase may still use these.
PROSE_WORDS: Final = GLUE_WORDS | frozenset(
    """
    stored kept managed rotated required set missing expired available valid invalid revoked
    given shared unknown empty held saved located found changed updated reset rotating
    rotates rotate expires expiring expire optional mandatory needed necessary sensitive
    hidden masked redacted encrypted hashed salted protected confidential permanent initial
    previous unchanged enabled disabled true false yes null nil undefined pending sent emailed
    printed written provided handled generated issued attached configured defined listed
    documented vault vaults keychain manager env environment variable variables config
    configuration file files settings policy policies rule rules requirement requirements
    length characters chars digits letters complexity minimum maximum contact check use
    using like such team owner owners admin admins platform security ops it department
    correct incorrect wrong right strong weak long short same different secure insecure new
    old private public personal temporary default current next simple
    1password lastpass bitwarden keepass dashlane
    stocké stockée gespeichert hinterlegt geändert guardada guardado almacenada armazenada
    opgeslagen zapisane przechowywane сохранён сохранен 保存 保管 저장
    """.split()
)

# A value followed by one of these is a quantity, not a credential (``password: 12 characters``).
UNIT_WORDS: Final = frozenset(
    "characters chars character digits digit letters symbols days day weeks months years hours minutes "
    "seconds attempts tries times users accounts".split()
)
# What an assignment's value can be without being a credential (``password=required``).
NON_VALUES: Final = frozenset(
    "true false yes no none null nil empty required optional set unset enabled disabled hidden masked "
    "redacted on off".split()
)

# Values that stand for a credential without being one.
PLACEHOLDER: Final = re.compile(
    r"""^(?:<[^>]*>|\$\{[^}]*\}|\$\([^)]*\)|\{\{[^}]*\}\}|\{[^}]*\}|\[[A-Za-z _-]*\]|%[A-Za-z_][A-Za-z0-9_]*%
    |\$[A-Za-z_][A-Za-z0-9_]*|(?:process\.)?env(?:iron)?[.:\[][^\s]*|os\.environ\S*|vault:\S+|secretref\S*
    |[*•·]+|x{3,}|\.{3,}|…|-+|_+|redacted|masked|hidden|removed|omitted|null|none|nil|n/?a|tbd|todo
    |your[_-]\S*|your(?:password|token|key|secret)\S*|replace[_-]?me|example|sample|dummy|placeholder
    |changeme-placeholder
    |(?-i:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+))$""",  # ALL_CAPS_NAMES: the variable that holds it
    re.IGNORECASE | re.VERBOSE,
)

SENTENCE_END: Final = ".!?:)"


def looks_like_secret(word: str) -> bool:
    """A digit, a symbol, or a capital after the first letter: how passwords and keys read,
    and words of prose do not."""
    word = word.rstrip(SENTENCE_END)
    return bool(word) and (
        any(c.isdigit() for c in word)
        or any(not c.isalnum() and c not in "'-" for c in word)
        or any(c.isupper() for c in word[1:])
    )


def is_prose_word(word: str, *, passphrase: bool = False) -> bool:
    """A word of sentences about a credential (``stored``, ``the``, ``rotated``, and words
    ending in -ed, -ing, -ly). With ``passphrase``, only the words that hold sentences
    together: a passphrase may use any other word (``correct horse battery staple``)."""
    low = word.lower().rstrip(SENTENCE_END)
    if passphrase:
        return low in GLUE_WORDS
    return low in PROSE_WORDS or (low.isalpha() and low.isascii() and low.endswith(("ed", "ing", "ly")))
