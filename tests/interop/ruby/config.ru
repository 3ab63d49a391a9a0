# Sidekiq 6.4's own dashboard, as a Rails-less app mounts it: under rackup, with the cookie
# session its CSRF protection needs.
require 'securerandom'
require 'rack/session/cookie'
require 'sidekiq/web'

use Rack::Session::Cookie, secret: SecureRandom.hex(32), same_site: true, max_age: 86_400
run Sidekiq::Web
